package slotlock_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/slotlock/slotlock"
	"github.com/slotlock/slotlock/internal/redistest"
)

// holdModel is the checker of TestRequestProperty: what the test's leases
// hold, registered after a grant returned and dropped before its release is
// sent, so that any overlap it sees was an overlap in Redis.
type holdModel struct {
	mu     sync.Mutex
	excl   map[string]int // key -> exclusive holders
	shared map[string]int // key -> shared holders
	units  map[string]int64
	limit  int64
	errs   []string
	grants int
}

// total returns how many grants the model saw.
func (m *holdModel) total() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.grants
}

func (m *holdModel) add(r slotlock.Request, sign int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if sign > 0 {
		m.grants++
	}
	for _, k := range r.Exclusive {
		m.excl[k] += sign
	}
	for _, k := range r.Shared {
		m.shared[k] += sign
	}
	for _, p := range r.Permits {
		m.units[p.Resource] += int64(sign) * p.Units
	}
	if sign < 0 {
		return
	}
	for k, n := range m.excl {
		if n > 1 || n == 1 && m.shared[k] > 0 {
			m.errs = append(m.errs, fmt.Sprintf("key %q: %d writers and %d readers at once", k, n, m.shared[k]))
		}
	}
	for res, u := range m.units {
		if u > m.limit {
			m.errs = append(m.errs, fmt.Sprintf("permit %q: %d units in use, limit %d", res, u, m.limit))
		}
	}
}

// holdsOf returns, for every key under the test's prefix, the tokens that
// hold something there: a lock key's holder, a hash's fields. Waiters'
// lines and reservations are not holds: they lapse by themselves
// (lockval.EntryTTL, lockval.ReserveTTL), and a waiter whose context ends
// outside its wait (during an attempt) leaves its line entry to lapse.
func (e *env) holdsOf(ctx context.Context) map[string][]string {
	e.t.Helper()
	out := map[string][]string{}
	masters, err := e.c.Masters(ctx)
	require.NoError(e.t, err)
	for _, m := range masters {
		keys, err := m.Do(ctx, "KEYS", e.prefix+"{*").AsStrSlice()
		require.NoError(e.t, err)
		for _, k := range keys {
			// Read through the cluster client: a key may move to another
			// master (resharding) between KEYS and the read.
			typ, err := e.client.Do(ctx, e.client.B().Type().Key(k).Build()).ToString()
			require.NoError(e.t, err)
			switch typ {
			case "string":
				v, err := e.client.Do(ctx, e.client.B().Get().Key(k).Build()).ToString()
				if err != nil && !rueidis.IsRedisNil(err) { // nil: expired since the listing
					e.t.Fatalf("GET %q: %v", k, err)
				}
				if err == nil && !strings.HasPrefix(v, "^") {
					out[k] = append(out[k], strings.TrimPrefix(strings.TrimRight(v, "!"), "~"))
				}
			case "zset":
				if strings.Contains(k, "}#s:") { // shared holders; lines are not holds
					f, err := e.client.Do(ctx, e.client.B().Zrange().Key(k).Min("0").Max("-1").Build()).AsStrSlice()
					require.NoError(e.t, err, "ZRANGE %q", k)
					out[k] = append(out[k], f...)
				}
			case "hash":
				f, err := e.client.Do(ctx, e.client.B().Hkeys().Key(k).Build()).AsStrSlice()
				require.NoError(e.t, err, "HKEYS %q", k)
				out[k] = append(out[k], f...)
			}
		}
	}
	return out
}

// TestRequestProperty: readers, writers and permit takers over a small
// keyspace, from three Lockers (two clients), with random waits and TTLs.
// The checker proves: never a writer with anyone else on a key, never more
// units of a resource than its limit in use, and nothing left in Redis by
// any failed attempt (its token is nowhere: no lock value, no holders
// hash field, no line entry, checked right after the failure), and nothing
// at all once everyone released.
func TestRequestProperty(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			e := newEnv(t)
			ctx := ctxT(t, 2*time.Minute)
			other, err := e.c.Client()
			require.NoError(t, err)
			t.Cleanup(other.Close)
			model := &holdModel{excl: map[string]int{}, shared: map[string]int{}, units: map[string]int64{}, limit: 3}
			var failedMu sync.Mutex
			var failures, leftovers int
			// Lockers 0 and 1 share a client (1 without the local queue);
			// 2 has its own client, as another process would.
			mk := func(c rueidis.Client, noLocal bool) *slotlock.Locker {
				l, err := slotlock.New(c, slotlock.Options{Prefix: e.prefix, PerSlot: m.perSlot, TTL: 2 * time.Second, NoLocalQueue: noLocal})
				require.NoError(t, err)
				t.Cleanup(func() { _ = l.Close() })
				l.SetAfterFailure(func(token string, err error) {
					fctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					defer cancel()
					for k, hs := range e.holdsOf(fctx) {
						for _, h := range hs {
							if h == token {
								t.Errorf("failed attempt (%v) left %q in %q", err, token, k)
								failedMu.Lock()
								leftovers++
								failedMu.Unlock()
							}
						}
					}
					failedMu.Lock()
					failures++
					failedMu.Unlock()
				})
				return l
			}
			lockers := []*slotlock.Locker{mk(e.client, false), mk(e.client, true), mk(other, false)}

			grants := requestWorkload(t, ctx, lockers, model, []string{"a", "b", "c", "{a}x", "d"}, 40, nil)
			t.Logf("grants (writers, readers, permit takers): %v; failed attempts checked: %d", grants, failures)
			require.Empty(t, model.errs)
			require.Zero(t, leftovers)
			for role, n := range grants {
				require.Positive(t, n, "role %d never got in: the model checked nothing of it", role)
			}
			require.Positive(t, failures, "the workload must contend")
			require.Empty(t, e.holdsOf(ctx), "everything released")
			// And what waiting left (lines, reservations) lapses.
			require.Eventually(t, func() bool { return len(e.lockKeys()) == 0 }, 8*time.Second, 50*time.Millisecond)
		})
	}
}

// requestWorkload runs 9 workers (writers, readers and permit takers, three
// of each, spread over lockers) for ops acquisitions each, or until stop
// closes, over keys and two resources of limit model.limit, registering
// every grant in model. It returns the grants per role.
func requestWorkload(t *testing.T, ctx context.Context, lockers []*slotlock.Locker, model *holdModel, keys []string, ops int, stop <-chan struct{}) [3]int {
	resources := []string{"pool", "{a}pool"}
	pick := func(r *rand.Rand, n int) []string {
		var out []string
		for _, i := range r.Perm(len(keys))[:n] {
			out = append(out, keys[i])
		}
		return out
	}
	var grants [3]int
	var gmu sync.Mutex
	var wg sync.WaitGroup
	for w := range 9 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), 17))
			l := lockers[w%len(lockers)]
			for op := 0; op < ops; op++ {
				select {
				case <-stop:
					return
				default:
				}
				var req slotlock.Request
				role := w % 3 // 0 writers, 1 readers, 2 permit takers
				switch role {
				case 0:
					ks := pick(r, 1+r.IntN(3))
					req.Exclusive = ks[:1]
					req.Shared = ks[1:]
				case 1:
					req.Shared = pick(r, 1+r.IntN(3))
				case 2:
					req.Permits = []slotlock.Permit{{Resource: resources[r.IntN(2)], Units: 1 + r.Int64N(2), Limit: model.limit}}
					if r.IntN(2) == 0 {
						req.Shared = pick(r, 1)
					}
				}
				if r.IntN(3) > 0 {
					req.Wait = time.Duration(50+r.IntN(300)) * time.Millisecond
				}
				actx, cancel := context.WithTimeout(ctx, 5*time.Second)
				lease, err := l.Acquire(actx, req)
				cancel()
				if err != nil {
					if !errors.Is(err, slotlock.ErrNotAcquired) && !errors.Is(err, context.DeadlineExceeded) {
						t.Errorf("acquire %+v: %v", req, err)
						return
					}
					continue
				}
				model.add(req, 1)
				gmu.Lock()
				grants[role]++
				gmu.Unlock()
				time.Sleep(time.Duration(r.IntN(3000)) * time.Microsecond)
				model.add(req, -1)
				if err := lease.Release(ctx); err != nil {
					t.Errorf("release: %v", err)
					return
				}
			}
		}()
	}
	wg.Wait()
	return grants
}

// TestRequestResharding runs the property workload while the slots of its
// keys and resources move between masters (MIGRATE of lock keys, holders
// sets and permit hashes alike): no writer with anyone, no resource over
// its limit, no failed attempt's token left, nothing held at the end.
func TestRequestResharding(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			c := redistest.StartForTest(t, redistest.Options{Replicas: redistest.NoReplicas})
			e := newEnvOn(t, c)
			ctx := ctxT(t, 120*time.Second)
			model := &holdModel{excl: map[string]int{}, shared: map[string]int{}, units: map[string]int64{}, limit: 3}
			var lockers []*slotlock.Locker
			for range 3 {
				l := e.locker(slotlock.Options{PerSlot: m.perSlot, TTL: 30 * time.Second})
				l.SetAfterFailure(func(token string, err error) {
					fctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					defer cancel()
					for k, hs := range e.holdsOf(fctx) {
						if slices.Contains(hs, token) {
							t.Errorf("failed attempt (%v) left %q in %q", err, token, k)
						}
					}
				})
				lockers = append(lockers, l)
			}
			keys := []string{"a", "b", "c", "{a}x", "d", "e", "f"}
			stop := make(chan struct{})
			done := make(chan [3]int, 1)
			go func() { done <- requestWorkload(t, ctx, lockers, model, keys, 1_000_000, stop) }()

			masters, err := c.Masters(ctx)
			require.NoError(t, err)
			moved := 0
			until := time.Now().Add(60 * time.Second)
			for round := 0; round < 12 || model.total() < 300 && time.Now().Before(until); round++ {
				moveSlotOf(t, ctx, c, masters, append(keys, "pool")[round%(len(keys)+1)], round)
				moved++
			}
			close(stop)
			grants := <-done
			t.Logf("slots moved %d; grants (writers, readers, permit takers) %v", moved, grants)
			require.Empty(t, model.errs)
			for role, n := range grants {
				require.Positive(t, n, "role %d never got in: the model checked nothing of it", role)
			}
			// Every hold is gone. A shared lock value once outlived its
			// holders here in about one run of ten (fixed: a release wrote,
			// then failed on a key of the migrating slot that its own
			// writes had deleted; TestMigratingSlotLastReader in
			// cluster_test).
			require.Empty(t, e.holdsOf(ctx), "left held at the end")
		})
	}
}
