package slotlock_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/slotlock/slotlock"
	"github.com/slotlock/slotlock/internal/redistest"
	"github.com/slotlock/slotlock/slot"
)

// exclusion is the in-process checker: it records which lease holds each
// key between grant and release, and fails the test the moment two leases
// hold one key.
type exclusion struct {
	t      testing.TB
	mu     sync.Mutex
	owner  map[string]int
	grants atomic.Int64
}

func newExclusion(t testing.TB) *exclusion {
	return &exclusion{t: t, owner: map[string]int{}}
}

func (x *exclusion) grant(id int, keys []string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	for _, k := range keys {
		if o, ok := x.owner[k]; ok {
			x.t.Errorf("key %q granted to %d while held by %d", k, id, o)
		}
		x.owner[k] = id
	}
	x.grants.Add(1)
}

func (x *exclusion) release(id int, keys []string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	for _, k := range keys {
		if x.owner[k] == id {
			delete(x.owner, k)
		}
	}
}

// leftBehind checks, right after a failed acquisition returned, that none of
// its keys carries its token: the rollback is synchronous, and no one else
// can write that token.
func leftBehind(t testing.TB, client rueidis.Client, names slot.Namer, token string, keys []string) {
	cmds := make(rueidis.Commands, len(keys))
	for i, k := range keys {
		cmds[i] = client.B().Get().Key(names.LockKey(k)).Build()
	}
	for i, r := range client.DoMulti(context.Background(), cmds...) {
		v, err := r.ToString()
		if rueidis.IsRedisNil(err) {
			continue
		}
		if err != nil {
			t.Errorf("GET lock key of %q: %v", keys[i], err)
			continue
		}
		if v == token || v == token+"!" {
			t.Errorf("failed attempt left key %q locked", keys[i])
		}
	}
}

func TestPropertyExclusiveAndFailuresLeaveNothing(t *testing.T) {
	for _, m := range modes {
		for _, shared := range []bool{false, true} {
			name := fmt.Sprintf("%s/separate-lockers", m.name)
			if shared {
				name = fmt.Sprintf("%s/one-locker", m.name)
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				e := newEnv(t)
				names, _ := slot.NewNamer(e.prefix)
				x := newExclusion(t)
				space := keysN("p", 300)
				const workers, ops = 8, 60
				// Every failed attempt, checked right after it returned (the
				// hook does not know the attempt's keys: check them all).
				check := func(token string, err error) {
					leftBehind(t, e.client, names, token, space)
				}
				newLocker := func() *slotlock.Locker {
					l := e.locker(slotlock.Options{TTL: 30 * time.Second, PerSlot: m.perSlot})
					l.SetAfterFailure(check)
					return l
				}
				var one *slotlock.Locker
				if shared {
					one = newLocker()
				}
				var failures, timeouts atomic.Int64
				var wg sync.WaitGroup
				for w := range workers {
					l := one
					if l == nil {
						l = newLocker()
					}
					wg.Add(1)
					go func() {
						defer wg.Done()
						r := rand.New(rand.NewPCG(uint64(w), 7))
						for op := range ops {
							n := 1 + r.IntN(200)
							if r.IntN(3) > 0 {
								n = 1 + r.IntN(10) // mostly small, some large
							}
							keys := make([]string, n)
							for i := range keys {
								keys[i] = space[r.IntN(len(space))]
							}
							ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
							var lease *slotlock.Lease
							var err error
							try := r.IntN(2) == 0
							if try {
								lease, err = l.TryLock(ctx, keys...)
							} else {
								lease, err = l.Lock(ctx, keys...)
							}
							cancel()
							if err != nil {
								failures.Add(1)
								if !try {
									timeouts.Add(1)
								}
								continue
							}
							id := w*ops + op
							x.grant(id, lease.Keys())
							if r.IntN(4) == 0 {
								time.Sleep(time.Duration(r.IntN(1000)) * time.Microsecond)
							}
							x.release(id, lease.Keys())
							if err := lease.Release(context.Background()); err != nil {
								// How far past its Deadline: a release after it
								// finds keys lapsed (the machine), one before it
								// a bug.
								t.Errorf("release: %v (Deadline %v ago)", err, time.Since(lease.Deadline()))
							}
						}
					}()
				}
				wg.Wait()
				t.Logf("grants %d, failed attempts %d (timeouts %d)", x.grants.Load(), failures.Load(), timeouts.Load())
				// A precondition, not a rate: some batch got in, so the
				// exclusion checks above had something to check. How many
				// get in within the timeouts is the machine's load.
				require.Positive(t, x.grants.Load(), "no grant: the test proves nothing")
				require.Empty(t, e.lockKeys(), "nothing locked at the end")
				if one != nil {
					require.Zero(t, one.LocalLen())
				}
			})
		}
	}
}

func TestOverlappingBatchesDoNotDeadlock(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			space := keysN("dl", 200)
			// Pairs of batches that overlap in opposite orders, and a ring
			// of three: A wants what B has and so on.
			batches := [][]string{
				space[0:100], reverse(space[0:100]),
				space[50:150], append(reverse(space[150:200]), space[0:60]...),
				append(space[100:200], space[0:10]...),
			}
			ctx := ctxT(t, 60*time.Second)
			var wg sync.WaitGroup
			x := newExclusion(t)
			for i, b := range batches {
				l := e.locker(slotlock.Options{TTL: 30 * time.Second, PerSlot: m.perSlot})
				wg.Add(1)
				go func() {
					defer wg.Done()
					for round := range 25 {
						lease, err := l.Lock(ctx, b...)
						if err != nil {
							t.Errorf("batch %d round %d: %v", i, round, err)
							return
						}
						x.grant(i, lease.Keys())
						// Hold for up to 2 ms: with grant and release back
						// to back the checker saw zero-length holds, and
						// two grants overlapping in Redis would rarely
						// overlap in it.
						time.Sleep(rand.N(2 * time.Millisecond))
						x.release(i, lease.Keys())
						if err := lease.Release(ctx); err != nil {
							t.Errorf("release: %v", err)
						}
					}
				}()
			}
			wg.Wait()
			require.Equal(t, int64(25*len(batches)), x.grants.Load())
			require.Empty(t, e.lockKeys())
		})
	}
}

func reverse(s []string) []string {
	out := make([]string, len(s))
	for i, v := range s {
		out[len(s)-1-i] = v
	}
	return out
}

func TestLargeBatchIsNotStarved(t *testing.T) {
	for _, shared := range []bool{true, false} {
		name := "separate-lockers"
		if shared {
			name = "one-locker"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			space := keysN("st", 1000)
			big := e.locker(slotlock.Options{TTL: 30 * time.Second})
			ctx := ctxT(t, 60*time.Second)
			stop := make(chan struct{})
			var wg sync.WaitGroup
			var small atomic.Int64
			for w := range 8 {
				l := big
				if !shared {
					l = e.locker(slotlock.Options{TTL: 30 * time.Second})
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					r := rand.New(rand.NewPCG(uint64(w), 3))
					for {
						select {
						case <-stop:
							return
						default:
						}
						keys := make([]string, 1+r.IntN(5))
						for i := range keys {
							keys[i] = space[r.IntN(len(space))]
						}
						lease, err := l.Lock(ctx, keys...)
						if err != nil {
							t.Errorf("small batch: %v", err)
							return
						}
						small.Add(1)
						time.Sleep(time.Millisecond) // hold it a little
						_ = lease.Release(ctx)
					}
				}()
			}
			// Let the small batches get going before the big one starts.
			require.Eventually(t, func() bool { return small.Load() > 50 }, 10*time.Second, time.Millisecond)
			// The bound: 30 s for a batch that takes ~10 ms uncontended.
			bctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			lease, err := big.Lock(bctx, space...)
			cancel()
			close(stop)
			require.NoError(t, err, "the 1,000-key batch starved (small batches done: %d)", small.Load())
			require.NoError(t, lease.Release(ctx))
			wg.Wait()
			require.Empty(t, e.lockKeys())
		})
	}
}

// commandCalls returns how many times cmd ran on node since its start.
func commandCalls(t testing.TB, ctx context.Context, n *redistest.Node, cmd string) int64 {
	info, err := n.Do(ctx, "INFO", "commandstats").ToString()
	require.NoError(t, err)
	var calls int64
	for _, line := range splitLines(info) {
		if _, err := fmt.Sscanf(line, "cmdstat_"+cmd+":calls=%d", &calls); err == nil {
			return calls
		}
	}
	return 0
}

func splitLines(s string) []string {
	var out []string
	start := 0
	for i := 0; i < len(s); i++ {
		if s[i] == '\n' {
			line := s[start:i]
			if len(line) > 0 && line[len(line)-1] == '\r' {
				line = line[:len(line)-1]
			}
			out = append(out, line)
			start = i + 1
		}
	}
	return out
}

func TestWaitingDoesNotPoll(t *testing.T) {
	// Not parallel: it counts script calls on a node.
	e := newEnv(t)
	holder := e.locker(slotlock.Options{TTL: 30 * time.Second})
	waiter := e.locker(slotlock.Options{TTL: 30 * time.Second})
	ctx := ctxT(t, 30*time.Second)
	const key = "poll:1"
	node, err := e.c.NodeForSlot(ctx, slot.KeySlot(key))
	require.NoError(t, err)
	h, err := holder.Lock(ctx, key)
	require.NoError(t, err)

	before := commandCalls(t, ctx, node, "evalsha") + commandCalls(t, ctx, node, "eval")
	got := lockInBackground(ctx, waiter, key)
	// Hold the key for 1.5 s while the waiter waits.
	names, _ := slot.NewNamer(e.prefix)
	require.Eventually(t, func() bool {
		v, _ := e.client.Do(ctx, e.client.B().Get().Key(names.LockKey(key)).Build()).ToString()
		return len(v) > 0 && v[len(v)-1] == '!'
	}, 5*time.Second, time.Millisecond)
	timer := time.NewTimer(1500 * time.Millisecond)
	<-timer.C
	during := commandCalls(t, ctx, node, "evalsha") + commandCalls(t, ctx, node, "eval") - before
	require.NoError(t, h.Release(ctx))
	require.NoError(t, <-got)
	t.Logf("script calls on %s during a 1.5 s wait: %d", node.Addr(), during)
	// A poll every millisecond would be ~1,500. A waiter by reservation
	// with nothing reserved refreshes every QueuedRefresh (400 ms), so
	// that a waiter whose hand-off message was lost still comes for its
	// reservation before it expires: a handful of scripts in 1.5 s. The
	// release wakes the waiter through its inbox. Bounded at 150 (more
	// than 10x; a poll every 10 ms would pass, one every millisecond,
	// 1,500, fails).
	require.LessOrEqual(t, during, int64(150))
}

func TestStandaloneServer(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t, 120*time.Second)
	c := redistest.StartStandaloneForTest(t, redistest.Options{})
	e := newEnvOn(t, c)
	a := e.locker(slotlock.Options{TTL: 10 * time.Second})
	b := e.locker(slotlock.Options{TTL: 10 * time.Second})
	keys := keysN("solo", 500)
	la, err := a.Lock(ctx, keys...)
	require.NoError(t, err)
	require.Len(t, e.lockKeys(), 500)
	_, err = b.TryLock(ctx, "x", keys[3])
	require.ErrorIs(t, err, slotlock.ErrNotAcquired)
	require.Len(t, e.lockKeys(), 500)
	got := lockInBackground(ctx, b, keys[499], "y")
	require.NoError(t, la.Release(ctx))
	require.NoError(t, <-got)
	require.Empty(t, e.lockKeys())

	// Fencing on a server without cluster mode: it refuses CLUSTER INFO,
	// and its tokens are drawn under epoch 0 (batch/scripts/fence.lua).
	f := e.locker(slotlock.Options{TTL: 10 * time.Second, Fencing: true})
	var last int64
	for range 3 {
		le, err := f.Lock(ctx, "fenced", "y")
		require.NoError(t, err)
		tok, ok := le.FencingToken("fenced")
		require.True(t, ok)
		require.Greater(t, tok, last)
		require.Less(t, tok, int64(1)<<32, "epoch 0")
		last = tok
		require.NoError(t, le.Release(ctx))
	}
}

// TestWaiterKeepsItsPrefix: a batch that waits keeps the keys below the one
// it waits for, whatever its TTL: no wait is longer than a third of the TTL
// while a prefix is held (the Lua strategy's attempts re-expire the prefix,
// the protocol renews it for the pipeline strategy). Before the protocol
// was shared, a Lua waiter's timer grew to a second whatever its TTL, and
// a waiter with a TTL under 3 s let its prefix expire while it waited.
func TestWaiterKeepsItsPrefix(t *testing.T) {
	for _, s := range []slotlock.Strategy{slotlock.StrategyLua, slotlock.StrategyPipeline} {
		t.Run(s.String(), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			ctx := ctxT(t, 30*time.Second)
			// Under MaxWait (1 s), so that a wait not bounded by TTL/3
			// lets the prefix expire; 800 ms, not shorter: with 150 ms a
			// renewal that a loaded machine delayed by 100 ms did (seen
			// at load 10).
			const ttl = 800 * time.Millisecond
			holder := e.locker(slotlock.Options{TTL: 10 * time.Second, Strategy: s})
			waiter := e.locker(slotlock.Options{TTL: ttl, Strategy: s})
			// One slot, so the canonical order is by bytes: a before b.
			a, b := "{prefix}a", "{prefix}b"
			hb, err := holder.Lock(ctx, b)
			require.NoError(t, err)
			got := lockInBackground(ctx, waiter, a, b)
			names, _ := slot.NewNamer(e.prefix)
			lockA := names.LockKey(a)
			exists := func() bool {
				n, err := e.client.Do(ctx, e.client.B().Exists().Key(lockA).Build()).AsInt64()
				require.NoError(t, err)
				return n == 1
			}
			for !exists() { // the waiter's first attempt takes a
				require.NoError(t, ctx.Err())
			}
			// 10 TTLs of waiting: a must stay held throughout.
			for end := time.Now().Add(10 * ttl); time.Now().Before(end); {
				require.True(t, exists(), "the waiter's prefix expired while it waited")
			}
			require.NoError(t, hb.Release(ctx))
			require.NoError(t, <-got)
			require.Empty(t, e.lockKeys())
		})
	}
}

// A release of a batch spread over every master is one script call per
// master, in one pipelined round trip: the engine groups a node's keys
// into one call (batch.groupRuns). A call grouped under the wrong node
// still ends well (the node refuses it, the engine replans per slot), so
// only the count shows the difference.
func TestReleaseIsOneScriptCallPerMaster(t *testing.T) {
	// Not parallel: it counts script calls on the masters.
	e := newEnv(t)
	l := e.locker(slotlock.Options{TTL: 30 * time.Second})
	ctx := ctxT(t, 30*time.Second)
	keys := keysN("percall", 100)
	warm, err := l.Lock(ctx, keys...) // the first lock runs the acquire script
	require.NoError(t, err)
	require.NoError(t, warm.Release(ctx))
	masters, err := e.c.Masters(ctx)
	require.NoError(t, err)
	require.Greater(t, len(masters), 1)
	scripts := func() []int64 {
		out := make([]int64, len(masters))
		for i, m := range masters {
			out[i] = commandCalls(t, ctx, m, "evalsha") + commandCalls(t, ctx, m, "eval")
		}
		return out
	}
	lease, err := l.Lock(ctx, keys...) // bare SET NX: no script
	require.NoError(t, err)
	before := scripts()
	require.NoError(t, lease.Release(ctx))
	after := scripts()
	for i, m := range masters {
		require.Equal(t, int64(1), after[i]-before[i], "script calls of the release on %s", m.Addr())
	}
}
