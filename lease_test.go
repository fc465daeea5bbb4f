package slotlock_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/slotlock/slotlock"
	"github.com/slotlock/slotlock/internal/lockval"
	"github.com/slotlock/slotlock/internal/redistest"
	"github.com/slotlock/slotlock/slot"
)

func TestReentrancyDepth100(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			l := e.locker(slotlock.Options{TTL: 20 * time.Second, PerSlot: m.perSlot})
			other := e.locker(slotlock.Options{TTL: 20 * time.Second, PerSlot: m.perSlot})
			ctx := ctxT(t, 60*time.Second)
			alice := slotlock.WithOwner(ctx, "request-alice")
			bob := slotlock.WithOwner(ctx, "request-bob")
			keys := keysN("re", 50)

			var leases []*slotlock.Lease
			for i := range 100 {
				le, err := l.Lock(alice, keys...)
				require.NoError(t, err, "depth %d", i+1)
				leases = append(leases, le)
			}
			// Same Locker, other owner: excluded, in memory and in Redis.
			_, err := l.TryLock(bob, keys[7])
			require.ErrorIs(t, err, slotlock.ErrNotAcquired)
			_, err = other.TryLock(ctx, keys[7])
			require.ErrorIs(t, err, slotlock.ErrNotAcquired)
			require.Len(t, e.lockKeys(), 50*2, "a lock key and a hold set per key")

			for i, le := range leases[:99] {
				require.NoError(t, le.Release(ctx), "release %d", i)
				_, err := other.TryLock(ctx, keys[i%50])
				require.ErrorIs(t, err, slotlock.ErrNotAcquired, "still held after %d releases", i+1)
			}
			require.NoError(t, leases[99].Release(ctx))
			require.Empty(t, e.lockKeys(), "free at zero holds")
			le, err := other.TryLock(ctx, keys...)
			require.NoError(t, err)
			require.NoError(t, le.Release(ctx))
		})
	}
}

func TestReentrantBatchIsAtomic(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	l := e.locker(slotlock.Options{TTL: 20 * time.Second})
	other := e.locker(slotlock.Options{TTL: 20 * time.Second})
	ctx := ctxT(t, 30*time.Second)
	alice := slotlock.WithOwner(ctx, "alice")

	first, err := l.Lock(alice, "a")
	require.NoError(t, err)
	blocker, err := other.Lock(ctx, "c")
	require.NoError(t, err)

	// a is alice's, b is free, c is someone else's: nothing changes.
	_, err = l.TryLock(alice, "a", "b", "c")
	require.ErrorIs(t, err, slotlock.ErrNotAcquired)
	lb, err := other.TryLock(ctx, "b")
	require.NoError(t, err, "b was not left locked")
	require.NoError(t, lb.Release(ctx))

	// One release of alice's first lease frees a: the failed attempt
	// added no hold.
	require.NoError(t, first.Release(ctx))
	le, err := other.TryLock(ctx, "a")
	require.NoError(t, err)
	require.NoError(t, le.Release(ctx))

	// With c free, a batch of held and free keys is taken as one.
	first, err = l.Lock(alice, "a")
	require.NoError(t, err)
	require.NoError(t, blocker.Release(ctx))
	second, err := l.Lock(alice, "a", "b", "c")
	require.NoError(t, err)
	require.NoError(t, second.Release(ctx))
	_, err = other.TryLock(ctx, "a")
	require.ErrorIs(t, err, slotlock.ErrNotAcquired, "a is still held by the first lease")
	le, err = other.TryLock(ctx, "b", "c")
	require.NoError(t, err)
	require.NoError(t, le.Release(ctx))
	require.NoError(t, first.Release(ctx))
	require.Empty(t, e.lockKeys())
}

func TestMismatchedOwnerCannotRelease(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	l := e.locker(slotlock.Options{TTL: 20 * time.Second})
	ctx := ctxT(t, 30*time.Second)
	alice := slotlock.WithOwner(ctx, "alice")
	a, err := l.Lock(alice, "x")
	require.NoError(t, err)

	// Another Locker, same owner id: another owner (the identity is keyed
	// by the Locker's secret), so it neither shares nor releases.
	other := e.locker(slotlock.Options{TTL: 20 * time.Second})
	_, err = other.TryLock(slotlock.WithOwner(ctx, "alice"), "x")
	require.ErrorIs(t, err, slotlock.ErrNotAcquired)

	// Forge a release with the wrong lease token on the right owner: the
	// engine checks hold-set membership, so nothing moves.
	before := e.lockKeys()
	b, err := l.Lock(alice, "y")
	require.NoError(t, err)
	require.NoError(t, b.Release(ctx))
	require.NoError(t, b.Release(ctx))
	require.Equal(t, before, e.lockKeys(), "y's lease did not touch x")
	require.NoError(t, a.Release(ctx))
	require.Empty(t, e.lockKeys())
}

func TestWatchdogKeepsLeaseAlive(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	// A TTL long enough that a renewal delayed by a loaded machine (the
	// race detector, other packages' clusters on the same two cores) still
	// lands in time: the test is about renewal, not about its latency.
	// (3 s: with 1 s, a renewal delayed by more than its 667 ms of slack
	// at load 10 let 67 of the 100 keys expire.)
	const ttl = 3 * time.Second
	l := e.locker(slotlock.Options{TTL: ttl, Renew: slotlock.RenewAlways})
	other := e.locker(slotlock.Options{TTL: time.Second})
	ctx := ctxT(t, 60*time.Second)
	keys := keysN("wd", 100)
	lease, err := l.Lock(ctx, keys...)
	require.NoError(t, err)
	start := time.Now()
	// 4x the TTL: without renewal every key would have expired 3 times.
	for time.Since(start) < 4*ttl {
		_, err := other.TryLock(ctx, keys[time.Now().Nanosecond()%100])
		require.ErrorIs(t, err, slotlock.ErrNotAcquired)
		select {
		case <-lease.Done():
			t.Fatalf("lease ended: %v", lease.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
	require.NoError(t, lease.Err())
	require.NoError(t, lease.Release(ctx))
	<-lease.Done()
	require.ErrorIs(t, lease.Err(), slotlock.ErrReleased)
	require.Empty(t, e.lockKeys())
}

func TestLostKeyIsDetectedByTheWatchdog(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	// A period (TTL/3) that a renewal of 500 keys fits in even on a loaded
	// 2-core machine: if a renewal ran late, other keys would expire too
	// and the loss would rightly name them, which is not what this tests.
	const ttl = 1500 * time.Millisecond
	// NoLossTracking: the watchdog alone, as when the server refuses
	// client tracking (TestLossIsSeenAtOnce covers the tracker).
	l := e.locker(slotlock.Options{TTL: ttl, Renew: slotlock.RenewAlways, NoLossTracking: true})
	ctx := ctxT(t, 30*time.Second)
	keys := keysN("lost", 500)
	lease, err := l.Lock(ctx, keys...)
	require.NoError(t, err)

	lctx, cancel := lease.Context(ctx)
	defer cancel()

	names, _ := slot.NewNamer(e.prefix)
	victim := lease.Keys()[123]
	require.NoError(t, e.client.Do(ctx, e.client.B().Del().Key(names.LockKey(victim)).Build()).Error())
	deleted := time.Now()
	select {
	case <-lease.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the watchdog did not notice the deleted key")
	}
	took := time.Since(deleted)
	<-lctx.Done()
	t.Logf("loss noticed %v after the DEL (renewal period %v)", took, ttl/3)
	require.ErrorIs(t, context.Cause(lctx), slotlock.ErrLeaseLost)
	var le *slotlock.LostError
	require.ErrorAs(t, lease.Err(), &le)
	require.Equal(t, []string{victim}, le.Keys)
	// Expected: one period to the next renewal, plus its round trip
	// (0.5-0.6 s measured under load). Only the 10 s above is asserted:
	// how late a renewal runs is the machine's load.
	// Release still cleans up what the lease held, and names the loss.
	err = lease.Release(ctx)
	require.ErrorAs(t, err, &le)
	require.Equal(t, []string{victim}, le.Keys)
	require.Empty(t, e.lockKeys())
}

func TestDoCancelsWorkWhenTheLeaseIsLost(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	l := e.locker(slotlock.Options{TTL: 300 * time.Millisecond, Renew: slotlock.RenewAlways})
	ctx := ctxT(t, 30*time.Second)
	names, _ := slot.NewNamer(e.prefix)
	err := l.Do(ctx, []string{"job:1", "job:2"}, func(ctx context.Context) error {
		require.NoError(t, e.client.Do(ctx, e.client.B().Del().Key(names.LockKey("job:2")).Build()).Error())
		<-ctx.Done() // the watchdog notices within a period
		require.ErrorIs(t, context.Cause(ctx), slotlock.ErrLeaseLost)
		return context.Cause(ctx)
	})
	require.ErrorIs(t, err, slotlock.ErrLeaseLost)
	require.Empty(t, e.lockKeys())
}

func TestFencingTokensStrictlyIncrease(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := ctxT(t, 120*time.Second)
	space := keysN("fence", 24)
	const workers, perWorker = 16, 625 // 10,000 grants

	var mu sync.Mutex
	last := map[string]int64{}
	grants := 0
	var wg sync.WaitGroup
	for w := range workers {
		l := e.locker(slotlock.Options{TTL: 10 * time.Second, Fencing: true})
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perWorker {
				keys := []string{space[(w+i)%len(space)], space[(w*7+i*3)%len(space)]}
				lease, err := l.Lock(ctx, keys...)
				if err != nil {
					t.Errorf("lock: %v", err)
					return
				}
				mu.Lock()
				for _, k := range lease.Keys() {
					tok, ok := lease.FencingToken(k)
					if !ok || tok <= last[k] {
						t.Errorf("key %q: token %d after %d", k, tok, last[k])
					}
					last[k] = tok
				}
				grants++
				mu.Unlock()
				if err := lease.Release(ctx); err != nil {
					t.Errorf("release: %v", err)
				}
			}
		}()
	}
	wg.Wait()
	require.Equal(t, workers*perWorker, grants)

	// A holder that dies without releasing (its keys expire): the next
	// grant still gets a larger token.
	crashed := e.locker(slotlock.Options{TTL: 50 * time.Millisecond, Renew: slotlock.RenewNever, Fencing: true})
	dead, err := crashed.Lock(ctx, space[0])
	require.NoError(t, err)
	deadTok, _ := dead.FencingToken(space[0])
	require.Greater(t, deadTok, last[space[0]])
	require.NoError(t, crashed.Close()) // it never releases
	next := e.locker(slotlock.Options{TTL: 10 * time.Second, Fencing: true})
	lease, err := next.Lock(ctx, space[0]) // waits out the dead holder's TTL
	require.NoError(t, err)
	tok, ok := lease.FencingToken(space[0])
	require.True(t, ok)
	require.Greater(t, tok, deadTok)
	_, ok = lease.FencingToken("not-in-lease")
	require.False(t, ok)
	require.NoError(t, lease.Release(ctx))

	plain := e.locker(slotlock.Options{TTL: 10 * time.Second})
	pl, err := plain.Lock(ctx, "x")
	require.NoError(t, err)
	_, ok = pl.FencingToken("x")
	require.False(t, ok, "no tokens without Options.Fencing")
	require.NoError(t, pl.Release(ctx))
}

func TestGuardedWrite(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	l := e.locker(slotlock.Options{TTL: 20 * time.Second})
	ctx := ctxT(t, 30*time.Second)
	order := e.prefix + ":order:42" // the user's own data key
	lease, err := l.Lock(ctx, order)
	require.NoError(t, err)

	_, err = lease.Guard(ctx, []string{order}, "SET", order, "paid")
	require.NoError(t, err)
	v, err := e.client.Do(ctx, e.client.B().Get().Key(order).Build()).ToString()
	require.NoError(t, err)
	require.Equal(t, "paid", v)

	// A command whose reply is nil ran, and says so: not an error.
	msg, err := lease.Guard(ctx, []string{order}, "SET", order, "again", "NX")
	require.NoError(t, err, "SET NX on a key that exists answers nil")
	require.True(t, msg.IsNil())
	msg, err = lease.Guard(ctx, []string{order}, "GETDEL", order)
	require.NoError(t, err)
	got, err := msg.ToString()
	require.NoError(t, err)
	require.Equal(t, "paid", got)
	msg, err = lease.Guard(ctx, []string{order}, "GET", order)
	require.NoError(t, err, "GET of a missing key answers nil")
	require.True(t, msg.IsNil())
	_, err = lease.Guard(ctx, []string{order}, "SET", order, "paid")
	require.NoError(t, err)

	_, err = lease.Guard(ctx, []string{"elsewhere"}, "SET", "elsewhere", "x")
	require.ErrorIs(t, err, slotlock.ErrInvalid, "no lease key in that slot")
	_, err = lease.Guard(ctx, []string{order, "other"}, "MSET", order, "a", "other", "b")
	require.ErrorIs(t, err, slotlock.ErrInvalid, "keys of two slots")

	// The lock is lost (an operator deletes it): the write is refused and
	// the data keeps its value.
	names, _ := slot.NewNamer(e.prefix)
	require.NoError(t, e.client.Do(ctx, e.client.B().Del().Key(names.LockKey(order)).Build()).Error())
	_, err = lease.Guard(ctx, []string{order}, "SET", order, "refunded")
	require.ErrorIs(t, err, slotlock.ErrLeaseLost)
	v, err = e.client.Do(ctx, e.client.B().Get().Key(order).Build()).ToString()
	require.NoError(t, err)
	require.Equal(t, "paid", v)
	<-lease.Done()
	require.NoError(t, e.client.Do(ctx, e.client.B().Del().Key(order).Build()).Error())
}

func TestMinReplicas(t *testing.T) {
	t.Parallel()
	c := redistest.StartForTest(t, redistest.Options{})
	e := newEnvOn(t, c)
	ctx := ctxT(t, 120*time.Second)
	const key = "{durable}:1" // key and key+":held" share a slot, so a master

	strict := e.locker(slotlock.Options{TTL: 20 * time.Second, MinReplicas: 1, ReplicaTimeout: 300 * time.Millisecond})
	lease, err := strict.Lock(ctx, key)
	require.NoError(t, err, "a healthy replica acknowledges")
	require.NoError(t, lease.Warning())
	require.NoError(t, lease.Release(ctx))

	master, err := c.NodeForSlot(ctx, slot.KeySlot(key))
	require.NoError(t, err)
	var replica *redistest.Node
	reps, err := c.Replicas(ctx)
	require.NoError(t, err)
	for _, r := range reps {
		if replicates(ctx, r, master) {
			replica = r
		}
	}
	require.NotNil(t, replica)
	held, err := strict.Lock(ctx, key+":held")
	require.NoError(t, err)
	heldMaster, err := c.NodeForSlot(ctx, slot.KeySlot(key+":held"))
	require.NoError(t, err)
	require.NoError(t, replica.Pause())
	defer func() { require.NoError(t, replica.Resume()) }()

	// An extension the replica does not acknowledge does not move the
	// deadline: a promoted replica would still have the old expiry.
	require.Equal(t, master, heldMaster)
	d0 := held.Deadline()
	err = held.Extend(ctx, time.Minute)
	require.ErrorIs(t, err, slotlock.ErrReplicas)
	require.Equal(t, d0, held.Deadline())
	require.NoError(t, held.Release(ctx))

	requireReplicaRefusal(t, e, strict, ctx, key, master.Addr())

	lenient := e.locker(slotlock.Options{TTL: 20 * time.Second, MinReplicas: 1,
		ReplicaTimeout: 300 * time.Millisecond, WarnOnReplicas: true})
	lease, err = lenient.Lock(ctx, key)
	require.NoError(t, err)
	require.ErrorIs(t, lease.Warning(), slotlock.ErrReplicas)
	require.NoError(t, lease.Release(ctx))
	require.Empty(t, e.lockKeys())
}

// TestRenewalSurvivesATransientFailure pauses the master of a lease's key
// for less than the TTL: the renewals that fall in the pause fail, the
// watchdog retries, and the lease lives on.
func TestRenewalSurvivesATransientFailure(t *testing.T) {
	t.Parallel()
	c := redistest.StartForTest(t, redistest.Options{Replicas: redistest.NoReplicas})
	e := newEnvOn(t, c)
	ctx := ctxT(t, 60*time.Second)
	const ttl = 3 * time.Second // renewal every second
	l := e.locker(slotlock.Options{TTL: ttl, Renew: slotlock.RenewAlways})
	const key = "transient:1"
	lease, err := l.Lock(ctx, key)
	require.NoError(t, err)
	master, err := c.NodeForSlot(ctx, slot.KeySlot(key))
	require.NoError(t, err)

	require.NoError(t, master.Pause())
	paused := time.NewTimer(1500 * time.Millisecond) // at least one renewal falls in it
	<-paused.C
	require.NoError(t, master.Resume())

	// Two more periods: the retried renewal lands.
	settle := time.NewTimer(2 * time.Second)
	select {
	case <-lease.Done():
		t.Fatalf("a pause shorter than the TTL cost the lease: %v", lease.Err())
	case <-settle.C:
	}
	require.NoError(t, lease.Err())
	require.True(t, time.Until(lease.Deadline()) > ttl/2, "renewed since the pause")
	require.NoError(t, lease.Release(ctx))
}

// TestRenewalIsTheDefault: a Locker given a TTL and nothing else renews its
// leases until they are released (before, a TTL turned renewal off and the
// lease expired mid-work).
func TestRenewalIsTheDefault(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	// A TTL a loaded machine's renewals still meet (see
	// TestWatchdogKeepsLeaseAlive).
	const ttl = time.Second
	l := e.locker(slotlock.Options{TTL: ttl})
	ctx := ctxT(t, 30*time.Second)
	lease, err := l.Lock(ctx, "renew-default")
	require.NoError(t, err)
	select {
	case <-lease.Done():
		t.Fatalf("lease ended: %v", lease.Err())
	case <-time.After(3 * ttl): // without renewal it ends after one TTL
	}
	require.NoError(t, lease.Err())
	require.NoError(t, lease.Release(ctx))
}

// TestRenewalKeepsAnExtension: a renewal after Lease.Extend never brings the
// keys' expiry back below the deadline the lease reports.
func TestRenewalKeepsAnExtension(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const ttl = time.Second
	l := e.locker(slotlock.Options{TTL: ttl})
	ctx := ctxT(t, 30*time.Second)
	lease, err := l.Lock(ctx, "renew-ext")
	require.NoError(t, err)
	require.NoError(t, lease.Extend(ctx, 20*time.Second))
	names, _ := slot.NewNamer(e.prefix)
	// Let several renewals (every TTL/3) run, then read the key's expiry.
	time.Sleep(3 * ttl)
	require.NoError(t, lease.Err())
	pttl, err := e.client.Do(ctx, e.client.B().Pttl().Key(names.LockKey("renew-ext")).Build()).AsInt64()
	require.NoError(t, err)
	require.Greater(t, pttl, int64(15_000), "a renewal shortened the extension")
	require.WithinDuration(t, time.Now().Add(time.Duration(pttl)*time.Millisecond), lease.Deadline(), time.Second)
	require.NoError(t, lease.Release(ctx))
}

// TestAReentrantWaiterWaitsByReservation: alice's second lease waits
// across Lockers for {r}a (alice's own, through her first lease), {r}b
// (free) and {r}c (another Locker's). While it waits it holds nothing of
// its own: {r}a is untouched (alice's, one hold), {r}b is its
// reservation (or free), not a hold, and it stands in {r}c's line. When {r}c is
// released it is granted all three, {r}a with a second hold, so that
// releasing the first lease leaves {r}a held. Mutations checked:
// reserve.lua without its owner branch ({r}a reads as another's: the
// waiter marks it and stands in its line); the waiter keeping its first
// attempt's holds ({r}b is held in alice's name while she waits).
func TestAReentrantWaiterWaitsByReservation(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := ctxT(t, 30*time.Second)
	l := e.locker(slotlock.Options{TTL: 20 * time.Second})
	other := e.locker(slotlock.Options{TTL: 20 * time.Second})
	alice := slotlock.WithOwner(ctx, "alice")
	a, b, c := "{r}a", "{r}b", "{r}c"

	first, err := l.Lock(alice, a)
	require.NoError(t, err)
	owned := e.lockValue(ctx, a)
	blocker, err := other.Lock(ctx, c)
	require.NoError(t, err)

	got := make(chan *slotlock.Lease, 1)
	errs := make(chan error, 1)
	go func() {
		wctx, cancel := context.WithTimeout(alice, 10*time.Second)
		defer cancel()
		le, err := l.Lock(wctx, a, b, c)
		if err != nil {
			errs <- err
			return
		}
		got <- le
	}()
	for e.queueLen(ctx, c) == 0 {
		select {
		case err := <-errs:
			t.Fatalf("the waiter ended before it stood in line: %v", err)
		case <-ctx.Done():
			t.Fatal("the waiter never stood in {r}c's line")
		case <-time.After(time.Millisecond):
		}
	}
	// Its reserve round wrote {r}b and queued at {r}c in one call (one
	// slot): what it left is in place.
	require.Equal(t, owned, e.lockValue(ctx, a), "{r}a while alice's second lease waits")
	// {r}b is its reservation (or free, were the reservation to lapse
	// on a machine too loaded to refresh it): never held in alice's name.
	if vb := e.lockValue(ctx, b); vb != "" {
		r, ok := lockval.ParseReserved(vb)
		require.True(t, ok, "{r}b while the waiter waits: %q, want its reservation", vb)
		require.NotEqual(t, lockval.Holder(owned), r.Waiter, "a reentrant waiter is named by its lease, not its owner")
	}

	require.NoError(t, blocker.Release(ctx))
	var second *slotlock.Lease
	select {
	case second = <-got:
	case err := <-errs:
		t.Fatalf("the waiter: %v", err)
	}
	require.NoError(t, first.Release(ctx))
	_, err = other.TryLock(ctx, a)
	require.ErrorIs(t, err, slotlock.ErrNotAcquired, "{r}a after the first lease's release: the second holds it")
	require.NoError(t, second.Release(ctx))
	require.Empty(t, withoutLines(e.lockKeys()))
}
