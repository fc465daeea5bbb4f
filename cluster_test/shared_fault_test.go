package clustertest

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/slotlock/slotlock"
)

// TestSharedHoldsThroughFaults: a lease holding shared keys and 3 of a
// resource's 4 permits, all on one master, with MinReplicas 1, lives
// through a pause of that master (shorter than its TTL) and then through
// its kill and the promotion of its replica: at each step, while the lease
// lives, a writer of its keys and a taker of 2 permits are refused, and a
// taker of the 4th permit is granted and the 5th refused, so the count
// never passes the limit. After its release everything is free.
func TestSharedHoldsThroughFaults(t *testing.T) {
	e := newEnv(t, 3*time.Minute)
	// A TTL well above the failover's time (node timeout 5 s, an election,
	// a loaded machine): the lease must outlive it by renewal.
	l := e.locker(e.client(), slotlock.Options{TTL: 30 * time.Second, MinReplicas: 1})
	other := e.locker(e.client(), slotlock.Options{TTL: 10 * time.Second, NoLocalQueue: true})
	victim := e.master(e.ctx, "sf")
	var shared []string
	for i := 0; len(shared) < 4; i++ {
		if k := fmt.Sprintf("sf:%d", i); e.master(e.ctx, k) == victim {
			shared = append(shared, k)
		}
	}
	pool := ""
	for i := 0; pool == ""; i++ {
		if r := fmt.Sprintf("pool:%d", i); e.master(e.ctx, r) == victim {
			pool = r
		}
	}
	permit := func(u int64) slotlock.Request {
		return slotlock.Request{Permits: []slotlock.Permit{{Resource: pool, Units: u, Limit: 4}}}
	}
	// Two readers: the key is in the holders-set form.
	lease, err := l.Acquire(e.ctx, slotlock.Request{Shared: shared, Permits: permit(3).Permits})
	if err != nil {
		t.Fatal(err)
	}
	reader, err := l.Acquire(e.ctx, slotlock.Request{Shared: shared[:2]})
	if err != nil {
		t.Fatal(err)
	}
	// settle retries op while it fails other than by a conflict: after a
	// failover, a Locker that used the dead master needs a moment to read
	// the new slot map (TestLockAfterFailover bounds it).
	settle := func(op func() (*slotlock.Lease, error)) (*slotlock.Lease, error) {
		deadline := time.Now().Add(15 * time.Second)
		for {
			le, err := op()
			if err == nil || errors.Is(err, slotlock.ErrNotAcquired) || time.Now().After(deadline) {
				return le, err
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	check := func(step string) {
		t.Helper()
		if err := lease.Err(); err != nil {
			t.Fatalf("%s: the lease ended: %v", step, err)
		}
		for _, k := range shared {
			if _, err := settle(func() (*slotlock.Lease, error) { return other.TryLock(e.ctx, k) }); !errors.Is(err, slotlock.ErrNotAcquired) {
				t.Fatalf("%s: a writer of %q: %v", step, k, err)
			}
		}
		if _, err := settle(func() (*slotlock.Lease, error) { return other.Acquire(e.ctx, permit(2)) }); !errors.Is(err, slotlock.ErrNotAcquired) {
			t.Fatalf("%s: 2 permits beside 3 of 4: %v", step, err)
		}
		fourth, err := settle(func() (*slotlock.Lease, error) { return other.Acquire(e.ctx, permit(1)) })
		if err != nil {
			t.Fatalf("%s: the 4th permit: %v", step, err)
		}
		if _, err := other.Acquire(e.ctx, permit(1)); !errors.Is(err, slotlock.ErrNotAcquired) {
			t.Fatalf("%s: a 5th permit of 4: %v", step, err)
		}
		if err := fourth.Release(e.ctx); err != nil {
			t.Fatalf("%s: release of the 4th permit: %v", step, err)
		}
	}
	check("before")

	if err := victim.Pause(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second) // renewals blocked, well within the TTL
	if err := victim.Resume(); err != nil {
		t.Fatal(err)
	}
	e.waitReady()
	time.Sleep(11 * time.Second) // a renewal since (TTL/3)
	check("after a pause")

	if err := victim.Kill(); err != nil {
		t.Fatal(err)
	}
	e.waitReady()                // the replica, which acknowledged every write, is master
	time.Sleep(11 * time.Second) // a renewal since, on the new master
	check("after a failover")

	if err := reader.Release(e.ctx); err != nil {
		t.Fatal(err)
	}
	if err := lease.Release(e.ctx); err != nil {
		t.Fatal(err)
	}
	w, err := settle(func() (*slotlock.Lease, error) {
		return other.Acquire(e.ctx, slotlock.Request{Exclusive: shared, Permits: permit(4).Permits})
	})
	if err != nil {
		t.Fatalf("after the releases: %v", err)
	}
	if err := w.Release(e.ctx); err != nil {
		t.Fatal(err)
	}
}
