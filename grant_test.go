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

// Every grant holds its keys for the lease's TTL from the request that
// granted it, whatever path it took (docs/safety.md, "Pauses"): a waiter
// whose keys were handed to it by their releases is granted by its
// confirm, which writes them as holds. The cross-process form, with the
// grantee SIGSTOPped at its grant, is cluster_test's
// TestAPausedGranteeKeepsItsKeys.

// hotLockers makes n Lockers, each with a client of its own (as separate
// processes have), on the test's prefix.
func hotLockers(t *testing.T, e *env, n int, opt slotlock.Options) []*slotlock.Locker {
	out := make([]*slotlock.Locker, n)
	for i := range out {
		out[i] = newEnvOn(t, e.c).locker(opt)
	}
	return out
}

// waitObserver counts the Lock calls that waited for keys held by others.
type waitObserver struct {
	nopObserver
	waited atomic.Int64
}

func (o *waitObserver) Acquired(ev slotlock.AcquireEvent) {
	if ev.Waited > 0 {
		o.waited.Add(1)
	}
}

// TestEveryGrantHoldsItsKeysForItsTTL: sixteen Lockers of their own lock
// three consecutive keys of eight, 40 rounds each (every batch waits,
// across Lockers: by reservation). Right after every grant each key is
// held by the lease (not reserved for it), and expires no earlier than
// the lease's Deadline (1 ms slack: PTTL is read on the server before the
// reply comes), which is at least the TTL after Lock was called.
// Precondition: some grant waited. Mutation: the former direct grant
// (`direct := true` in protocol's lockByReservation): keys reserved for
// the lease with about 500 ms left; this test fails.
func TestEveryGrantHoldsItsKeysForItsTTL(t *testing.T) {
	e := newEnv(t)
	names, err := slot.NewNamer(e.prefix)
	require.NoError(t, err)
	ctx := ctxT(t, 90*time.Second)
	const ttl = 10 * time.Second
	obs := &waitObserver{}
	ls := hotLockers(t, e, 16, slotlock.Options{TTL: ttl, Observer: obs})
	keys := make([]string, 8)
	for i := range keys {
		keys[i] = fmt.Sprintf("g:%d", i)
	}
	var grants atomic.Int64
	var wg sync.WaitGroup
	for w, l := range ls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range 40 {
				set := []string{keys[(w+r)%8], keys[(w+r+1)%8], keys[(w+r+2)%8]}
				called := time.Now()
				le, err := l.Lock(ctx, set...)
				if err != nil {
					t.Errorf("lock: %v", err)
					return
				}
				grants.Add(1)
				checkHeldForTTL(t, ctx, e, names, le, set, called.Add(ttl))
				if err := le.Release(ctx); err != nil {
					t.Errorf("release: %v", err)
					return
				}
			}
		}()
	}
	wg.Wait()
	t.Logf("%d grants, %d of them waited", grants.Load(), obs.waited.Load())
	require.Positive(t, obs.waited.Load(), "no grant waited: the test proves nothing")
}

// checkHeldForTTL fails t unless every key of set is held by le, with an
// expiry no earlier than le's Deadline, and the Deadline no earlier than
// atLeast.
func checkHeldForTTL(t *testing.T, ctx context.Context, e *env, names slot.Namer, le *slotlock.Lease, set []string, atLeast time.Time) {
	t.Helper()
	dl := le.Deadline()
	if dl.Before(atLeast) {
		t.Errorf("Deadline %v is before the TTL after Lock was called (%v)", dl, atLeast)
	}
	for _, k := range set {
		lk := names.LockKey(k)
		res := e.client.DoMulti(ctx, e.client.B().Get().Key(lk).Build(), e.client.B().Pttl().Key(lk).Build())
		reply := time.Now()
		v, err := res[0].ToString()
		if err != nil {
			t.Errorf("get %s: %v", k, err)
			continue
		}
		if h := lockval.Holder(v); h != le.Token() {
			t.Errorf("key %s right after the grant is %q, not held by the lease %s", k, v, le.Token())
		}
		pttl, err := res[1].AsInt64()
		if err != nil {
			t.Errorf("pttl %s: %v", k, err)
			continue
		}
		if exp := reply.Add(time.Duration(pttl)*time.Millisecond + time.Millisecond); dl.After(exp) {
			t.Errorf("key %s: Deadline %v is after the expiry %v the server read", k, dl, exp)
		}
	}
}

// handedWaiter makes a holder hold key, starts a waiter (another Locker,
// another client) on it, waits until the waiter stands in the key's queue,
// releases the holder (which hands the key to the waiter) and returns the
// waiter's lease and when its Lock was called.
func handedWaiter(t *testing.T, e *env, ctx context.Context, opt slotlock.Options, key string) (*slotlock.Lease, time.Time) {
	t.Helper()
	holder := e.locker(opt)
	w := newEnvOn(t, e.c).locker(opt)
	h, err := holder.Lock(ctx, key)
	require.NoError(t, err)
	type granted struct {
		le     *slotlock.Lease
		called time.Time
	}
	got := make(chan granted, 1)
	go func() {
		called := time.Now()
		le, err := w.Lock(ctx, key)
		if err != nil {
			t.Errorf("waiter: %v", err)
		}
		got <- granted{le, called}
	}()
	require.Eventually(t, func() bool { return e.queueLen(ctx, key) == 1 }, 10*time.Second, time.Millisecond)
	require.NoError(t, h.Release(ctx))
	g := <-got
	require.NotNil(t, g.le)
	return g.le, g.called
}

// TestAHandedWaiterHoldsItsKeyForItsTTL: a waiter in another Locker whose
// key a release hands to it holds it at its grant, for its TTL, plain or
// fenced (a fenced one with its fence). Mutation: the former direct grant
// (the plain case fails: the key is still the waiter's reservation).
func TestAHandedWaiterHoldsItsKeyForItsTTL(t *testing.T) {
	for _, fencing := range []bool{false, true} {
		t.Run(fmt.Sprintf("fencing=%v", fencing), func(t *testing.T) {
			e := newEnv(t)
			ctx := ctxT(t, 30*time.Second)
			const ttl = 10 * time.Second
			names, err := slot.NewNamer(e.prefix)
			require.NoError(t, err)
			le, called := handedWaiter(t, e, ctx, slotlock.Options{TTL: ttl, Fencing: fencing}, "handed:1")
			checkHeldForTTL(t, ctx, e, names, le, []string{"handed:1"}, called.Add(ttl))
			if fencing {
				f, ok := le.FencingToken("handed:1")
				require.True(t, ok)
				require.Positive(t, f)
			}
			require.NoError(t, le.Release(ctx))
		})
	}
}
