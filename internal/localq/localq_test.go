package localq

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestTryAcquireAllOrNothing(t *testing.T) {
	q := New()
	a, b := &Holder{}, &Holder{}
	require.Nil(t, q.TryAcquire([]string{"x", "y"}, a))
	cs := q.TryAcquire([]string{"w", "y", "z"}, b)
	require.Equal(t, []Conflict{{Index: 1, TTL: -1}}, cs)
	require.Equal(t, 2, q.Len(), "b took nothing")
	q.Release([]string{"x", "y"}, a)
	require.Zero(t, q.Len())
}

// Both sides of grantBuf: a batch whose entries grantFree keeps on the
// stack, and a larger one, which takes the check-then-take path; either
// way a batch is all or nothing, here and while waiting.
func TestAllOrNothingAroundGrantBuf(t *testing.T) {
	for _, n := range []int{grantBuf, grantBuf + 1} {
		q := New()
		a, b := &Holder{}, &Holder{}
		keys := make([]string, n)
		for i := range keys {
			keys[i] = fmt.Sprint("k", i)
		}
		require.Nil(t, q.TryAcquire(keys[n-1:], a), "n=%d", n)
		cs := q.TryAcquire(keys, b)
		require.Equal(t, []Conflict{{Index: n - 1, TTL: -1}}, cs, "n=%d", n)
		require.Equal(t, 1, q.Len(), "n=%d: b took nothing", n)

		got := make(chan error, 1)
		go func() { got <- q.Acquire(context.Background(), keys, b) }()
		// b waits (for a); until a leaves, no key of b's is granted to
		// anyone else and a's key stays a's.
		require.Never(t, func() bool { return len(got) > 0 }, 20*time.Millisecond, time.Millisecond, "n=%d", n)
		q.Release(keys[n-1:], a)
		require.NoError(t, <-got, "n=%d", n)
		require.Equal(t, n, q.Len(), "n=%d: b holds every key", n)
		require.NotNil(t, q.TryAcquire(keys[:1], a), "n=%d", n)
		q.Release(keys, b)
		require.Zero(t, q.Len(), "n=%d", n)
	}
}

func TestWaitersAreServedInArrivalOrder(t *testing.T) {
	q := New()
	first := &Holder{}
	require.NoError(t, q.Acquire(context.Background(), []string{"k"}, first))
	var mu sync.Mutex
	var order []int
	var wg sync.WaitGroup
	for i := range 5 {
		h := &Holder{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			require.NoError(t, q.Acquire(context.Background(), []string{"k"}, h))
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			q.Release([]string{"k"}, h)
		}()
		// Wait until waiter i is queued before starting the next one.
		require.Eventually(t, func() bool {
			q.mu.Lock()
			defer q.mu.Unlock()
			return len(q.m["k"].waiters) == i+1
		}, time.Second, time.Millisecond)
	}
	q.Release([]string{"k"}, first)
	wg.Wait()
	require.Equal(t, []int{0, 1, 2, 3, 4}, order)
	require.Zero(t, q.Len())
}

func TestCancelledWaiterLeavesTheQueue(t *testing.T) {
	q := New()
	a, b, c := &Holder{}, &Holder{}, &Holder{}
	require.NoError(t, q.Acquire(context.Background(), []string{"k"}, a))
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- q.Acquire(ctx, []string{"j", "k"}, b) }()
	require.Eventually(t, func() bool {
		q.mu.Lock()
		defer q.mu.Unlock()
		return len(q.m["k"].waiters) == 1
	}, time.Second, time.Millisecond)
	cancel()
	require.ErrorIs(t, <-errc, context.Canceled)
	// b left the queue and its reservation of j with it: c gets j at once.
	require.Nil(t, q.TryAcquire([]string{"j"}, c))
	q.Release([]string{"j"}, c)
	q.Release([]string{"k"}, a)
	require.Zero(t, q.Len())
}

// waiting returns the holders that wait in q, oldest first.
func waiting(q *Table) []*Holder {
	q.mu.Lock()
	defer q.mu.Unlock()
	var out []*Holder
	for w := q.head; w != nil; w = w.next {
		out = append(out, w.h)
	}
	return out
}

// waitQueued waits until n goroutines wait in q.
func waitQueued(t *testing.T, q *Table, n int) {
	t.Helper()
	require.Eventually(t, func() bool { return len(waiting(q)) == n }, 5*time.Second, time.Millisecond)
}

// TestOldestWaiterReservesOthersMayPass: a waiter that is not the oldest
// holds nothing while it waits, so a later batch whose keys are free runs
// at once (with a held prefix in canonical order it would have waited); the
// oldest waiter's keys are reserved, so no later batch takes them and it
// runs as soon as their holder leaves.
func TestOldestWaiterReservesOthersMayPass(t *testing.T) {
	q := New()
	ctx := context.Background()
	a, b, c, d := &Holder{}, &Holder{}, &Holder{}, &Holder{}
	require.NoError(t, q.Acquire(ctx, []string{"x"}, a))
	bDone, cDone := make(chan struct{}), make(chan struct{})
	go func() { require.NoError(t, q.Acquire(ctx, []string{"x", "y"}, b)); close(bDone) }()
	waitQueued(t, q, 1)
	go func() { require.NoError(t, q.Acquire(ctx, []string{"w", "x"}, c)); close(cDone) }()
	waitQueued(t, q, 2)

	// y is free but reserved for b, the oldest waiter.
	require.Equal(t, []Conflict{{Index: 0, TTL: -1}}, q.TryAcquire([]string{"y"}, d))
	// w is free and only c, not the oldest, wants it: d passes c.
	require.Nil(t, q.TryAcquire([]string{"w"}, d))

	// Grants are made inside Release: what still waits when it returns
	// was not granted.
	q.Release([]string{"x"}, a)
	require.Equal(t, []*Holder{c}, waiting(q), "b, the oldest, got x; c was not granted x while b holds it")
	<-bDone
	q.Release([]string{"x", "y"}, b)
	require.Equal(t, []*Holder{c}, waiting(q), "c was not granted w while d holds it")
	q.Release([]string{"w"}, d)
	<-cDone
	q.Release([]string{"w", "x"}, c)
	require.Zero(t, q.Len())
}

// TestNoDeadlockInAnyKeyOrder: waiters hold nothing while they wait, so
// batches that name their keys in opposite orders cannot deadlock here.
func TestNoDeadlockInAnyKeyOrder(t *testing.T) {
	q := New()
	ctx, cancel := context.WithTimeoutCause(context.Background(), 10*time.Second, errStuck)
	defer cancel()
	var wg sync.WaitGroup
	for g := range 8 {
		keys := []string{"a", "b", "c"}
		if g%2 == 1 {
			slices.Reverse(keys)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 200 {
				h := &Holder{}
				if err := q.Acquire(ctx, keys, h); err != nil {
					t.Errorf("%v: %v", keys, err)
					return
				}
				runtime.Gosched()
				q.Release(keys, h)
			}
		}()
	}
	wg.Wait()
	require.Zero(t, q.Len())
}

func TestExpiredHolderIsTakenOver(t *testing.T) {
	q := New()
	old, next := &Holder{}, &Holder{}
	require.NoError(t, q.Acquire(context.Background(), []string{"k"}, old))
	old.SetDeadline(time.Now().Add(30 * time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	// The old holder never releases: the waiter takes over after its
	// deadline (Redis still has the last word).
	require.NoError(t, q.Acquire(ctx, []string{"k"}, next))
	require.False(t, time.Now().Before(time.Unix(0, old.deadline.Load())))
	q.Release([]string{"k"}, old) // late release of a taken-over key: no effect
	cs := q.TryAcquire([]string{"k"}, &Holder{})
	require.Len(t, cs, 1, "next still holds k")
	q.Release([]string{"k"}, next)
	require.Zero(t, q.Len())
}

func TestSameOwnerShares(t *testing.T) {
	q := New()
	a, b := &Holder{Owner: "o"}, &Holder{Owner: "o"}
	other := &Holder{Owner: "p"}
	require.NoError(t, q.Acquire(context.Background(), []string{"k"}, a))
	require.NoError(t, q.Acquire(context.Background(), []string{"k", "l"}, b))
	require.Len(t, q.TryAcquire([]string{"k"}, other), 1)
	q.Release([]string{"k"}, a)
	require.Len(t, q.TryAcquire([]string{"k"}, other), 1, "b still holds k")
	q.Release([]string{"k", "l"}, b)
	require.Nil(t, q.TryAcquire([]string{"k"}, other))
	q.Release([]string{"k"}, other)
	require.Zero(t, q.Len())
}

// TestOwnerPassesAReservation: a key its owner holds is admitted to the
// owner's next lease even while the oldest waiter reserves it; refusing
// would deadlock an owner that locks a key again while holding it (the
// waiter waits for that owner's first lease anyway).
func TestOwnerPassesAReservation(t *testing.T) {
	q := New()
	ctx := context.Background()
	a, again, other := &Holder{Owner: "o"}, &Holder{Owner: "o"}, &Holder{Owner: "p"}
	require.NoError(t, q.Acquire(ctx, []string{"k"}, a))
	done := make(chan struct{})
	go func() { require.NoError(t, q.Acquire(ctx, []string{"k"}, other)); close(done) }()
	waitQueued(t, q, 1)
	tctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	require.NoError(t, q.Acquire(tctx, []string{"k"}, again))
	q.Release([]string{"k"}, again)
	q.Release([]string{"k"}, a)
	<-done
	q.Release([]string{"k"}, other)
	require.Zero(t, q.Len())
}

// TestExclusionUnderChurn runs many goroutines over a few keys, with
// cancelled waits among them, so that entries are forgotten, recycled and
// reused for other keys while waiters still refer to them: no key may ever
// have two holders, and the table must end empty.
var errStuck = errors.New("waited 10 s")

func TestExclusionUnderChurn(t *testing.T) {
	q := New()
	const keys, workers, rounds = 8, 16, 300
	var holders [keys]atomic.Int32
	var wg sync.WaitGroup
	for g := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(g), 7))
			for range rounds {
				// 1 to 3 distinct keys in canonical (here: numeric) order.
				set := map[int]bool{}
				for range 1 + r.IntN(3) {
					set[r.IntN(keys)] = true
				}
				var idx []int
				for k := range set {
					idx = append(idx, k)
				}
				slices.Sort(idx)
				names := make([]string, len(idx))
				for i, k := range idx {
					names[i] = fmt.Sprintf("k%d", k)
				}
				h := &Holder{}
				// A lost hand-over would leave a waiter stuck: bound every
				// wait, and call running into the bound a failure.
				ctx, cancel := context.WithTimeoutCause(context.Background(), 10*time.Second, errStuck)
				if r.IntN(4) == 0 {
					cancel() // some waits give up at once or midway
				}
				err := q.Acquire(ctx, names, h)
				cancel()
				if errors.Is(err, errStuck) {
					t.Errorf("a waiter for %v was never served", names)
					return
				}
				if err != nil {
					continue
				}
				for _, k := range idx {
					if n := holders[k].Add(1); n != 1 {
						t.Errorf("key k%d has %d holders", k, n)
					}
				}
				runtime.Gosched()
				for _, k := range idx {
					holders[k].Add(-1)
				}
				q.Release(names, h)
			}
		}()
	}
	wg.Wait()
	require.Zero(t, q.Len(), "every key forgotten")
}

// Shared holders of a key do not exclude each other once granted in
// Redis (a reader waits here while the first is still acquiring), but
// exclude a writer; a reader does not pass the oldest waiter (a writer),
// and readers waiting behind it are granted at its release, each as the
// one before it is granted in Redis (Granted).
// Mutations: freeFor admitting a reader whatever the holders' mode (the
// writer is let in beside the readers); freeFor ignoring the
// reservation for readers (r3 passes the waiting writer).
func TestSharedHolders(t *testing.T) {
	q := New()
	sh := []bool{true}
	r1, r2 := &Holder{Shared: sh}, &Holder{Shared: sh}
	require.Nil(t, q.TryAcquire([]string{"k"}, r1))
	ctx0, cancel0 := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel0()
	require.Error(t, q.Acquire(ctx0, []string{"k"}, r2), "a waiting reader joined one still acquiring in Redis")
	r1.SetDeadline(time.Now().Add(time.Minute))
	q.Granted([]string{"k"}, r1)
	require.NoError(t, q.Acquire(context.Background(), []string{"k"}, r2), "readers share")
	r0 := &Holder{Shared: sh}
	require.Nil(t, q.TryAcquire([]string{"k"}, r0), "a try joins readers, granted or not")
	q.Release([]string{"k"}, r0)
	w := &Holder{}
	require.NotNil(t, q.TryAcquire([]string{"k"}, w), "a writer beside readers")

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	wDone := make(chan error, 1)
	go func() { wDone <- q.Acquire(ctx, []string{"k"}, w) }()
	require.Eventually(t, func() bool {
		q.mu.Lock()
		defer q.mu.Unlock()
		return q.head != nil
	}, 5*time.Second, time.Millisecond)
	r3, r4 := &Holder{Shared: sh}, &Holder{Shared: sh}
	require.NotNil(t, q.TryAcquire([]string{"k"}, r3), "a reader passed the waiting writer")
	rDone := make(chan error, 2)
	go func() { rDone <- q.Acquire(ctx, []string{"k"}, r3) }()
	go func() { rDone <- q.Acquire(ctx, []string{"k"}, r4) }()
	holders := func() []*Holder {
		q.mu.Lock()
		defer q.mu.Unlock()
		return slices.Clone(q.m["k"].holders)
	}
	require.Eventually(t, func() bool {
		q.mu.Lock()
		defer q.mu.Unlock()
		return len(q.m["k"].waiters) == 3
	}, 5*time.Second, time.Millisecond, "the writer and two readers wait")
	q.Release([]string{"k"}, r1)
	q.Release([]string{"k"}, r2)
	require.NoError(t, <-wDone)
	require.Equal(t, []*Holder{w}, holders(), "a reader was granted beside the writer")
	q.Release([]string{"k"}, w)
	require.NoError(t, <-rDone) // one reader, then the other once it is granted in Redis
	for _, r := range []*Holder{r3, r4} {
		r.SetDeadline(time.Now().Add(time.Minute))
		q.Granted([]string{"k"}, r)
	}
	require.NoError(t, <-rDone) // both readers hold k at once
	q.Release([]string{"k"}, r3)
	q.Release([]string{"k"}, r4)
	require.Zero(t, q.Len())
}

// TestReaderWokenWhenTheUngrantedReaderLeaves: a waiting reader that
// waits only because a co-reader is not granted in Redis yet is granted
// when that co-reader leaves (its acquisition failed), though another
// reader still holds the key. Mutation: releaseLocked touching waiters
// only when the key's last holder leaves (the reader waits for the
// granted one's release).
func TestReaderWokenWhenTheUngrantedReaderLeaves(t *testing.T) {
	q := New()
	sh := []bool{true}
	g, u, r := &Holder{Shared: sh}, &Holder{Shared: sh}, &Holder{Shared: sh}
	require.Nil(t, q.TryAcquire([]string{"k"}, g))
	g.SetDeadline(time.Now().Add(time.Minute))
	require.Nil(t, q.TryAcquire([]string{"k"}, u)) // acquiring in Redis
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- q.Acquire(ctx, []string{"k"}, r) }()
	require.Eventually(t, func() bool {
		q.mu.Lock()
		defer q.mu.Unlock()
		return len(q.m["k"].waiters) == 1
	}, 5*time.Second, time.Millisecond, "the reader waits for the one acquiring")
	q.Release([]string{"k"}, u)
	require.NoError(t, <-done, "not woken while g still held k")
	q.Release([]string{"k"}, g)
	q.Release([]string{"k"}, r)
	require.Zero(t, q.Len())
}
