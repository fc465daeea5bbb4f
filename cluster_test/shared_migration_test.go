package clustertest

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/slotlock/slotlock"
	"github.com/slotlock/slotlock/internal/redistest"
	"github.com/slotlock/slotlock/slot"
)

// TestMigratingSlotLastReader: the last of two readers of a shared key
// releases while the key's slot is MIGRATING on its owner (IMPORTING
// elsewhere, nothing moved yet), in both script modes, with and without a
// writer waiting for the key (its mark '!' and its line), or with a line
// of one dead entry. Redis refuses a
// script's command on a key of a migrating slot that does not exist on the
// source ("non local key") and keeps the writes made before it. The
// release's ZREM of the last member deleted the holders set and its next
// read of the set failed the call: the lock value (~ or ~!) stayed with no
// holders set beside it until its TTL, and the retry no longer found the
// reader (the leftover TestRequestResharding/per-slot logged in one run of
// ten or so: per-slot calls run on the source only when the key's line
// exists there too, i.e. with a writer waiting). The release must free the
// key or hand it to the writer, or fail having written nothing; once the
// migration is called off, the writer gets the key and nothing is left.
func TestMigratingSlotLastReader(t *testing.T) {
	c := redistest.StartForTest(t, redistest.Options{}) // one cluster, the cases in turn
	for _, m := range []struct {
		name                   string
		perSlot, writer, ghost bool
	}{
		{"per-node", false, false, false}, {"per-node-writer", false, true, false}, {"per-node-dead-waiter", false, false, true},
		{"per-slot", true, false, false}, {"per-slot-writer", true, true, false}, {"per-slot-dead-waiter", true, false, true},
	} {
		t.Run(m.name, func(t *testing.T) {
			e := newEnvOn(t, c, 2*time.Minute)
			l := e.locker(e.client(), slotlock.Options{TTL: 3 * time.Second, PerSlot: m.perSlot})
			w := e.locker(e.client(), slotlock.Options{TTL: 3 * time.Second, PerSlot: m.perSlot})
			const key = "catalog:9"
			lock := e.names.LockKey(key)
			r1, err := l.Acquire(e.ctx, slotlock.Request{Shared: []string{key}})
			if err != nil {
				t.Fatal(err)
			}
			r2, err := l.Acquire(e.ctx, slotlock.Request{Shared: []string{key}})
			if err != nil {
				t.Fatal(err)
			}
			got := make(chan error, 1)
			if m.writer {
				go func() {
					ctx, cancel := context.WithTimeout(e.ctx, 30*time.Second)
					defer cancel()
					le, err := w.Lock(ctx, key)
					if err == nil {
						err = le.Release(e.ctx)
					}
					got <- err
				}()
				// Wait until the writer has marked the key.
				deadline := time.Now().Add(10 * time.Second)
				for {
					v, _ := e.master(e.ctx, key).Do(e.ctx, "GET", lock).ToString()
					if strings.HasSuffix(v, "!") {
						break
					}
					if time.Now().After(deadline) {
						t.Fatalf("the writer did not mark %q: %q", lock, v)
					}
					time.Sleep(10 * time.Millisecond)
				}
			}
			if m.ghost {
				// A line whose one entry's deadline passed (a waiter whose
				// context ended mid-attempt leaves it to lapse), and the
				// key marked: the release's hand_off finds no live waiter
				// and must delete the key, its ZREMs of the dead entry
				// emptying the line.
				q := e.names.QueueKeyInSlot(key, slot.KeySlot(key))
				m := e.master(e.ctx, key)
				for _, cmd := range [][]string{
					{"ZADD", q, "1", "ghost"},
					{"PEXPIRE", q, "10000"}, {"SET", lock, "~!", "KEEPTTL"},
				} {
					if err := m.Do(e.ctx, cmd...).Error(); err != nil {
						t.Fatal(err)
					}
				}
			}
			if err := r1.Release(e.ctx); err != nil {
				t.Fatal(err)
			}
			src, dst, s := e.startMigration(key)
			rerr := r2.Release(e.ctx)
			v, gerr := src.Do(e.ctx, "GET", lock).ToString()
			keys, _ := src.Do(e.ctx, "CLUSTER", "GETKEYSINSLOT", s, "10").AsStrSlice()
			t.Logf("release of the last reader during the migration of slot %s: %v; then %q = %q (%v), keys of the slot on the source: %q", s, rerr, lock, v, gerr, keys)
			set := e.names.SharedKeyInSlot(key, slot.KeySlot(key))
			switch {
			case gerr == nil && strings.HasPrefix(v, "~") && rerr == nil:
				t.Errorf("%q left as %q after the last reader's release returned", lock, v)
			case gerr == nil && strings.HasPrefix(v, "~"):
				// Failed: it must have written nothing, so that a
				// release later still finds the reader.
				if _, err := src.Do(e.ctx, "ZSCORE", set, r2.Token()).ToString(); err != nil {
					t.Errorf("the failed release left %q = %q without the reader in %q (%v): the call wrote before it failed", lock, v, set, err)
				}
			}
			// Call the migration off; the writer then gets the key (or
			// its lease lapses), and nothing may be left.
			e.callOffMigration(src, dst, s)
			if m.writer {
				if err := <-got; err != nil {
					t.Errorf("the writer: %v", err)
				}
			}
			if rerr != nil {
				_ = r2.Release(e.ctx)
			}
			e.requireUnlocked(5 * time.Second) // a failed release's keys lapse by the TTL
		})
	}
}

// TestMigratingSlotLastOwnerLease: the reentrant form of
// TestMigratingSlotLastReader. Two leases of one owner hold a key (its hold
// set has two fields); the last releases while the slot is MIGRATING. Its
// HDEL of the last field deleted the hold set and the HLEN after it was
// refused, after the HDEL: the key stayed locked by the owner until its
// TTL, and a retry no longer found the lease. The release must free the
// key or fail having written nothing.
func TestMigratingSlotLastOwnerLease(t *testing.T) {
	c := redistest.StartForTest(t, redistest.Options{}) // one cluster, the cases in turn
	for _, m := range []struct {
		name    string
		perSlot bool
	}{{"per-node", false}, {"per-slot", true}} {
		t.Run(m.name, func(t *testing.T) {
			e := newEnvOn(t, c, 2*time.Minute)
			l := e.locker(e.client(), slotlock.Options{TTL: 3 * time.Second, PerSlot: m.perSlot})
			const key = "ledger:4"
			lock := e.names.LockKey(key)
			ctx := slotlock.WithOwner(e.ctx, "job-1")
			a, err := l.Lock(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			b, err := l.Lock(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			if err := a.Release(e.ctx); err != nil {
				t.Fatal(err)
			}
			src, dst, s := e.startMigration(key)
			rerr := b.Release(e.ctx)
			_, gerr := src.Do(e.ctx, "GET", lock).ToString()
			holds := e.names.HoldCountKeyInSlot(key, slot.KeySlot(key))
			n, herr := src.Do(e.ctx, "HLEN", holds).AsInt64()
			t.Logf("release of the last lease during the migration of slot %s: %v; lock key read: %v; hold set: %d (%v)", s, rerr, gerr, n, herr)
			switch {
			case gerr == nil && rerr == nil:
				t.Errorf("%q still locked after the last lease's release returned", lock)
			case gerr == nil && (herr != nil || n != 1):
				t.Errorf("the failed release left %q locked and its hold set with %d fields (%v): the call wrote before it failed", lock, n, herr)
			}
			e.callOffMigration(src, dst, s)
			e.requireUnlocked(5 * time.Second) // a failed release's keys lapse by the TTL
		})
	}
}
