package slotlock_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/slotlock/slotlock"
	"github.com/slotlock/slotlock/internal/lockval"
	"github.com/slotlock/slotlock/slot"
)

// Tests of the direct grant (docs/proposals/direct-grant.md, 6.5): a
// waiter by reservation whose keys are all reserved for it, as its own
// calls' replies and hand-off messages prove, is granted with no confirm;
// its keys stay in reserved form until its first renewal, at most R/4
// later.

// hotLockers makes n Lockers, each with a client of its own (as separate
// processes have), on the test's prefix.
func hotLockers(t *testing.T, e *env, n int, opt slotlock.Options) []*slotlock.Locker {
	out := make([]*slotlock.Locker, n)
	for i := range out {
		out[i] = newEnvOn(t, e.c).locker(opt)
	}
	return out
}

// TestDirectGrantDeadlineIsALowerBound: after every direct grant, each key's
// expiry as the server reads it right after is no earlier than the lease's
// Deadline (1 ms slack: PTTL is read on the server before the reply comes).
// Sixteen Lockers, three of eight keys a batch, about 1,000 grants.
// Mutation: Deadline from the message's receipt or the latest round's send
// time instead of the named call's send time.
func TestDirectGrantDeadlineIsALowerBound(t *testing.T) {
	e := newEnv(t)
	names, err := slot.NewNamer(e.prefix)
	require.NoError(t, err)
	_, direct := hotRounds(t, e, "dl", 16, 8, 63, 0, func(ctx context.Context, le *slotlock.Lease, set []string) {
		if !le.DirectGrant() {
			return
		}
		dl := le.Deadline()
		for _, k := range set {
			pttl, err := e.client.Do(ctx, e.client.B().Pttl().Key(names.LockKey(k)).Build()).AsInt64()
			reply := time.Now()
			if err != nil {
				t.Errorf("pttl: %v", err)
				continue
			}
			if exp := reply.Add(time.Duration(pttl)*time.Millisecond + time.Millisecond); dl.After(exp) {
				t.Errorf("key %s: Deadline %v is after the expiry %v the server read", k, dl, exp)
			}
		}
	})
	require.Positive(t, direct, "no direct grant: the test proves nothing")
}

// directWaiter makes a holder hold key, starts a waiter (another Locker,
// another client) on it, waits until the waiter stands in the key's queue,
// releases the holder and returns the waiter's lease.
func directWaiter(t *testing.T, e *env, ctx context.Context, opt slotlock.Options, key string) *slotlock.Lease {
	t.Helper()
	holder := e.locker(opt)
	w := newEnvOn(t, e.c).locker(opt)
	h, err := holder.Lock(ctx, key)
	require.NoError(t, err)
	got := make(chan *slotlock.Lease, 1)
	go func() {
		le, err := w.Lock(ctx, key)
		if err != nil {
			t.Errorf("waiter: %v", err)
		}
		got <- le
	}()
	require.Eventually(t, func() bool { return e.queueLen(ctx, key) == 1 }, 10*time.Second, time.Millisecond)
	require.NoError(t, h.Release(ctx))
	le := <-got
	require.NotNil(t, le)
	return le
}

// TestDirectGrantConverts: a lease granted directly and held for two
// seconds keeps its keys: its first renewal, R/4 after the grant, turns
// the reservation into an ordinary hold, and Deadline moves to about the
// TTL ahead. Mutation: no conversion timer (the tracker ends the lease at
// its short Deadline, about R after the grant).
func TestDirectGrantConverts(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, 30*time.Second)
	const ttl = 10 * time.Second
	le := directWaiter(t, e, ctx, slotlock.Options{TTL: ttl}, "conv:1")
	require.True(t, le.DirectGrant(), "the waiter was not granted directly")
	require.Less(t, time.Until(le.Deadline()), time.Second, "a direct grant's Deadline is the reservation's, about R ahead")
	names, err := slot.NewNamer(e.prefix)
	require.NoError(t, err)
	lk := names.LockKey("conv:1")
	require.Eventually(t, func() bool {
		v, err := e.client.Do(ctx, e.client.B().Get().Key(lk).Build()).ToString()
		return err == nil && lockval.Holder(v) == le.Token()
	}, 2*time.Second, 5*time.Millisecond, "the reservation was never converted into a hold")
	select {
	case <-le.Done():
		t.Fatalf("lost after its direct grant: %v", le.Err())
	case <-time.After(2 * time.Second):
	}
	require.Greater(t, time.Until(le.Deadline()), ttl/2, "Deadline after the conversion")
	require.NoError(t, le.Release(ctx))
}

// TestDirectGrantReleasedInReservedForm: a lease released before its
// conversion leaves nothing of its own: the key is gone, or handed to the
// next waiter. Mutation: the reserved lease released through release1
// (which finds the value not its own: reported lost, the key left for R).
func TestDirectGrantReleasedInReservedForm(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, 30*time.Second)
	le := directWaiter(t, e, ctx, slotlock.Options{TTL: 10 * time.Second}, "rel:1")
	require.True(t, le.DirectGrant())
	require.NoError(t, le.Release(ctx))
	for k, v := range e.lockKeys() {
		w, _ := lockval.ReservedFor(v)
		require.NotEqual(t, le.Token(), w, "key %s still reserved for the released lease", k)
		require.NotEqual(t, le.Token(), lockval.Holder(v), "key %s still held by the released lease", k)
	}
}

// TestFencedWaiterStillConfirms: a fenced lease needs the confirm's fences:
// waiters with Fencing are never granted directly, and get fences.
// Mutation: Direct ignoring Fencing (fences zero).
func TestFencedWaiterStillConfirms(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, 30*time.Second)
	le := directWaiter(t, e, ctx, slotlock.Options{TTL: 10 * time.Second, Fencing: true}, "fenced:1")
	require.False(t, le.DirectGrant())
	f, ok := le.FencingToken("fenced:1")
	require.True(t, ok)
	require.Positive(t, f)
	require.NoError(t, le.Release(ctx))
}

// hotRounds has n Lockers of their own lock three consecutive keys (mod
// nkeys) of prefix:0..nkeys-1, rounds times each, call granted on every
// grant (nil: nothing), hold every lease for hold (failing the test if it
// is lost meanwhile), and returns how many grants there were and how many
// of them were direct. With three of a handful of keys a batch, every
// batch waits.
func hotRounds(t *testing.T, e *env, prefix string, n, nkeys, rounds int, hold time.Duration, granted func(context.Context, *slotlock.Lease, []string)) (total, direct int64) {
	ctx := ctxT(t, 90*time.Second)
	ls := hotLockers(t, e, n, slotlock.Options{TTL: 10 * time.Second})
	keys := make([]string, nkeys)
	for i := range keys {
		keys[i] = fmt.Sprintf("%s:%d", prefix, i)
	}
	var d, all atomic.Int64
	var wg sync.WaitGroup
	for w, l := range ls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range rounds {
				set := []string{keys[(w+r)%nkeys], keys[(w+r+1)%nkeys], keys[(w+r+2)%nkeys]}
				le, err := l.Lock(ctx, set...)
				if err != nil {
					t.Errorf("lock: %v", err)
					return
				}
				all.Add(1)
				if le.DirectGrant() {
					d.Add(1)
				}
				if granted != nil {
					granted(ctx, le, set)
				}
				if hold > 0 {
					select {
					case <-le.Done():
						t.Errorf("lost while held: %v", le.Err())
					case <-time.After(hold):
					}
				}
				if err := le.Release(ctx); err != nil {
					t.Errorf("release: %v", err)
					return
				}
			}
		}()
	}
	wg.Wait()
	t.Logf("%d grants, %d direct", all.Load(), d.Load())
	return all.Load(), d.Load()
}

// TestNoFalseLossInReservedForm: leases granted directly and held 50 ms
// (less than their conversion's R/4) are never reported lost: the loss
// tracker reads a key reserved for the lease as the lease's. Most grants
// are direct. Mutation: the tracker comparing the holder alone (every
// direct grant lost at once).
func TestNoFalseLossInReservedForm(t *testing.T) {
	total, direct := hotRounds(t, newEnv(t), "nfl", 8, 4, 25, 50*time.Millisecond, nil)
	require.Greater(t, 2*direct, total, "fewer than half the grants were direct: the test proves little")
}

// TestDirectGrantCounts: in the contended shape (Lockers of their own on
// a hot set, every batch waits), most grants are direct, so the feature
// cannot be silently off. Mutation: the direct grant disabled (all
// confirm).
func TestDirectGrantCounts(t *testing.T) {
	total, direct := hotRounds(t, newEnv(t), "cnt", 8, 4, 40, 0, nil)
	require.Greater(t, 2*direct, total, "fewer than half the grants were direct")
}
