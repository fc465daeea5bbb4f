package slotlock_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/slotlock/slotlock"
	"github.com/slotlock/slotlock/slot"
)

// Permits wait by reservation's rules, first come first served per
// resource (docs/design.md, "Shared keys and permits"). Every Locker sits
// on a client of its own, as in separate processes.

// TestPermitsFirstComeFirstServed: a request for all four units of a pool
// waits behind a holder of three; small requests that come after it
// would fit beside the holder but do not pass it: a try is refused, and
// a waiting one is granted only after the big one has had its turn. The
// big request is not starved by a stream of small ones. Mutation:
// shared_acquire.lua not checking the permit's line for a newcomer (the
// try takes the fourth unit, and the big request waits for it).
func TestPermitsFirstComeFirstServed(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			ctx := ctxT(t, 60*time.Second)
			opt := slotlock.Options{TTL: 30 * time.Second, PerSlot: m.perSlot}
			units := func(u int64, wait time.Duration) slotlock.Request { return permitRequest("pool", u, wait) }
			h, err := e.ownLocker(opt).Acquire(ctx, units(3, 0))
			require.NoError(t, err)

			type grant struct {
				l   *slotlock.Lease
				err error
			}
			big := make(chan grant, 1)
			go func() {
				l, err := e.ownLocker(opt).Acquire(ctx, units(4, slotlock.WaitForever))
				big <- grant{l, err}
			}()
			require.Eventually(t, func() bool { return e.permitLine(ctx, "pool") == 1 }, 10*time.Second, time.Millisecond,
				"the big request stands in the pool's line")

			_, err = e.ownLocker(opt).Acquire(ctx, units(1, 0))
			require.ErrorIs(t, err, slotlock.ErrNotAcquired, "a small request passed the big one")
			small := make(chan grant, 1)
			go func() {
				l, err := e.ownLocker(opt).Acquire(ctx, units(1, slotlock.WaitForever))
				small <- grant{l, err}
			}()
			require.Eventually(t, func() bool { return e.permitLine(ctx, "pool") == 2 }, 10*time.Second, time.Millisecond,
				"the small request stands in line behind the big one")

			require.NoError(t, h.Release(ctx)) // the big one's turn
			b := <-big
			require.NoError(t, b.err)
			require.NoError(t, b.l.Release(ctx)) // then the small one's
			s := <-small
			require.NoError(t, s.err)
			require.NoError(t, s.l.Release(ctx))
			require.Empty(t, e.lockKeys())
		})
	}
}

// TestCancelWhileWaitingForPermitsLeavesNothing: a request waiting for
// units is cancelled; by the time Acquire returns it has left the line,
// and nothing of it is left. Mutation: the leave skipping permits
// (reserve.lua mode 'P' a no-op: the entry stays until its deadline).
func TestCancelWhileWaitingForPermitsLeavesNothing(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, 30*time.Second)
	opt := slotlock.Options{TTL: 30 * time.Second}
	req := func(wait time.Duration) slotlock.Request {
		return slotlock.Request{Exclusive: []string{"cp:x"}, Permits: []slotlock.Permit{{Resource: "cp", Units: 2, Limit: 2}}, Wait: wait}
	}
	h, err := e.ownLocker(opt).Acquire(ctx, slotlock.Request{Permits: []slotlock.Permit{{Resource: "cp", Units: 1, Limit: 2}}})
	require.NoError(t, err)
	wctx, cancel := context.WithCancel(ctx)
	got := make(chan error, 1)
	go func() {
		_, err := e.ownLocker(opt).Acquire(wctx, req(slotlock.WaitForever))
		got <- err
	}()
	require.Eventually(t, func() bool { return e.permitLine(ctx, "cp") == 1 }, 10*time.Second, time.Millisecond)
	cancel()
	require.ErrorIs(t, <-got, context.Canceled)
	for k := range e.lockKeys() {
		require.False(t, strings.Contains(k, "#q") || strings.HasSuffix(k, ":cp:x"), "left behind: %q", k)
	}
	require.NoError(t, h.Release(ctx))
	require.Empty(t, e.lockKeys())
}

// permitLine returns how many waiters stand in resource's line.
func (e *env) permitLine(ctx context.Context, resource string) int64 {
	e.t.Helper()
	names, err := slot.NewNamer(e.prefix)
	require.NoError(e.t, err)
	q := names.PermitQueueKeyInSlot(resource, slot.KeySlot(resource))
	n, err := e.client.Do(ctx, e.client.B().Zcard().Key(q).Build()).AsInt64()
	require.NoError(e.t, err)
	return n
}

// permitRequest asks for units of resource (limit 4), waiting wait.
func permitRequest(resource string, units int64, wait time.Duration) slotlock.Request {
	return slotlock.Request{Permits: []slotlock.Permit{{Resource: resource, Units: units, Limit: 4}}, Wait: wait}
}

// TestAKilledWaiterBlocksNoNewcomer: a waiter killed at the head of a
// permit's line, or a writer killed in a shared key's line, blocks
// nobody, though its entry's deadline is a minute away: a request whose
// units fit, and a reader joining the key's readers, are granted (their
// Waits are a tenth of that deadline). Nobody listens on the dead one's
// inbox. Mutation: heard() in common.lua always true (both Waits run
// out).
func TestAKilledWaiterBlocksNoNewcomer(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			ctx := ctxT(t, 60*time.Second)
			opt := slotlock.Options{TTL: 30 * time.Second, PerSlot: m.perSlot}
			names, err := slot.NewNamer(e.prefix)
			require.NoError(t, err)
			// The killed waiter: the oldest ticket, a deadline a minute
			// away (only its deafness can pass it), an inbox in the line's
			// slot that nobody listens on.
			dead := func(tagged string) string {
				return "dead/1 " + tagged[:strings.IndexByte(tagged, '}')+1] + "#in:gone"
			}

			h, err := e.ownLocker(opt).Acquire(ctx, permitRequest("kw", 2, 0))
			require.NoError(t, err)
			q := names.PermitQueueKeyInSlot("kw", slot.KeySlot("kw"))
			e.entryByHand(ctx, q, dead(q), 1, e.serverMs(ctx, "kw")+60_000)
			p, err := e.ownLocker(opt).Acquire(ctx, permitRequest("kw", 2, 6*time.Second))
			require.NoError(t, err, "a newcomer whose units fit waited for a killed waiter")

			const k = "kw:k"
			r0, err := e.ownLocker(opt).Acquire(ctx, slotlock.Request{Shared: []string{k}})
			require.NoError(t, err)
			q = names.QueueKeyInSlot(k, slot.KeySlot(k))
			e.enqueueByHand(ctx, k, dead(q), 1, e.serverMs(ctx, k)+60_000) // and marks k, as a join does
			r1, err := e.ownLocker(opt).Acquire(ctx, slotlock.Request{Shared: []string{k}, Wait: 6 * time.Second})
			require.NoError(t, err, "a reader waited for a killed writer")

			for _, l := range []*slotlock.Lease{h, p, r0, r1} {
				require.NoError(t, l.Release(ctx))
			}
		})
	}
}
