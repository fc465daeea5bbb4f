package slotlock_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/slotlock/slotlock"
	"github.com/slotlock/slotlock/internal/redistest"
	"github.com/slotlock/slotlock/slot"
)

// TestReshardingKeepsExclusionAndAllOrNothing moves the slots of the keys
// being locked between masters (SETSLOT MIGRATING/IMPORTING, MIGRATE of
// the lock keys, SETSLOT NODE) while workers lock overlapping batches. The
// scripts then meet MOVED, ASK, TRYAGAIN and "non local key"; none of that
// may produce a double grant or leave a failed attempt's key behind.
func TestReshardingKeepsExclusionAndAllOrNothing(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			c := redistest.StartForTest(t, redistest.Options{Replicas: redistest.NoReplicas})
			e := newEnvOn(t, c)
			names, _ := slot.NewNamer(e.prefix)
			ctx := ctxT(t, 120*time.Second)
			space := keysN("rs", 120)
			x := newExclusion(t)
			check := func(token string, err error) {
				leftBehind(t, e.client, names, token, space)
			}

			stop := make(chan struct{})
			var wg sync.WaitGroup
			var once sync.Once
			halt := func() { once.Do(func() { close(stop) }); wg.Wait() }
			defer halt() // workers stop before the test ends, pass or fail
			var failures, conflicts, timeouts atomic.Int64
			for w := range 6 {
				l := e.locker(slotlock.Options{TTL: 30 * time.Second, PerSlot: m.perSlot})
				l.SetAfterFailure(check)
				wg.Add(1)
				go func() {
					defer wg.Done()
					r := rand.New(rand.NewPCG(uint64(w), 11))
					for op := 0; ; op++ {
						select {
						case <-stop:
							return
						default:
						}
						keys := make([]string, 1+r.IntN(40))
						for i := range keys {
							keys[i] = space[r.IntN(len(space))]
						}
						actx, cancel := context.WithTimeout(ctx, 5*time.Second)
						var lease *slotlock.Lease
						var err error
						if r.IntN(2) == 0 {
							lease, err = l.TryLock(actx, keys...)
						} else {
							lease, err = l.Lock(actx, keys...)
						}
						cancel()
						if err != nil {
							failures.Add(1)
							switch {
							case errors.Is(err, slotlock.ErrNotAcquired):
								conflicts.Add(1)
							case errors.Is(err, context.DeadlineExceeded):
								timeouts.Add(1)
							default:
								t.Logf("attempt failed: %v", err)
							}
							continue
						}
						id := w*1_000_000 + op
						x.grant(id, lease.Keys())
						x.release(id, lease.Keys())
						if err := lease.Release(ctx); err != nil {
							t.Errorf("release: %v", err)
						}
					}
				}()
			}

			masters, err := c.Masters(ctx)
			require.NoError(t, err)
			r := rand.New(rand.NewPCG(5, 5))
			moved := 0
			// Keep moving slots until the workers have done real work
			// across the moves (and at least a dozen moves).
			until := time.Now().Add(60 * time.Second)
			for round := 0; round < 12 || x.grants.Load() < 200 && time.Now().Before(until); round++ {
				moveSlotOf(t, ctx, c, masters, space[r.IntN(len(space))], round)
				moved++
			}
			halt()
			t.Logf("slots moved %d, grants %d, failed attempts %d (conflicts %d, Lock timeouts %d)",
				moved, x.grants.Load(), failures.Load(), conflicts.Load(), timeouts.Load())
			require.GreaterOrEqual(t, x.grants.Load(), int64(200))
			require.Empty(t, e.lockKeys())
		})
	}
}

// moveSlotOf moves key k's slot from its master to another of masters
// (chosen by round), with its keys.
func moveSlotOf(t *testing.T, ctx context.Context, c *redistest.Cluster, masters []*redistest.Node, k string, round int) {
	t.Helper()
	s := slot.KeySlot(k)
	owner, err := c.NodeForSlot(ctx, s)
	require.NoError(t, err)
	to := masters[(round+1)%len(masters)]
	if to == owner {
		to = masters[(round+2)%len(masters)]
	}
	require.NoError(t, c.MoveSlot(ctx, s, to), "move slot %d", s)
}
