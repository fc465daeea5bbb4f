package batch

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/slotlock/slotlock/internal/redistest"
	"github.com/slotlock/slotlock/slot"
)

// TestSharedAcquireMigratingSetRefusedFirst runs shared_acquire.lua
// itself (node form, as the engine sends it, with no retry or cleanup
// after it) for [A, B] on one master: A free in a stable slot, B a shared
// key whose slot is MIGRATING on this node and whose holders set is not
// here (the set form '~' with its set moved away, or one holder that a
// second reader turns into the set form). Redis 7.0 refuses a script's
// command on a missing key of a migrating slot ("non local key") and
// keeps what the script wrote before it; the engine reads an error as
// nothing written. So the call must fail before its first write: A must
// not be left with the reader in it.
func TestSharedAcquireMigratingSetRefusedFirst(t *testing.T) {
	c := redistest.StartForTest(t, redistest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	names, err := slot.NewNamer("migset")
	if err != nil {
		t.Fatal(err)
	}
	// Two keys of different slots on one master.
	keyA, keyB := "a0", ""
	src, err := c.NodeForSlot(ctx, slot.KeySlot(names.LockKey(keyA)))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; keyB == ""; i++ {
		k := fmt.Sprintf("b%d", i)
		if slot.KeySlot(names.LockKey(k)) == slot.KeySlot(names.LockKey(keyA)) {
			continue
		}
		n, err := c.NodeForSlot(ctx, slot.KeySlot(names.LockKey(k)))
		if err != nil {
			t.Fatal(err)
		}
		if n.ID() == src.ID() {
			keyB = k
		}
	}
	lockA, lockB := names.LockKey(keyA), names.LockKey(keyB)
	setA := names.SharedKeyInSlot(keyA, slot.KeySlot(keyA))
	setB := names.SharedKeyInSlot(keyB, slot.KeySlot(keyB))
	sB := fmt.Sprint(slot.KeySlot(lockB))
	masters, err := c.Masters(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var dst *redistest.Node
	for _, m := range masters {
		if m.ID() != src.ID() {
			dst = m
			break
		}
	}
	if dst == nil {
		t.Fatal("one master only")
	}
	stable := func() {
		for _, n := range []*redistest.Node{dst, src} {
			_ = n.Do(context.Background(), "CLUSTER", "SETSLOT", sB, "STABLE").Error()
		}
	}
	t.Cleanup(stable)

	for _, tc := range []struct{ name, b string }{
		{"set-form", "~"},           // the holders set moved away, the lock key not yet
		{"second-reader", "~other"}, // a set that does not exist yet
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, cmd := range [][]string{{"DEL", lockA}, {"SET", lockB, tc.b, "PX", "30000"}} {
				if err := src.Do(ctx, cmd...).Error(); err != nil {
					t.Fatal(err)
				}
			}
			if err := dst.Do(ctx, "CLUSTER", "SETSLOT", sB, "IMPORTING", src.ID()).Error(); err != nil {
				t.Fatal(err)
			}
			if err := src.Do(ctx, "CLUSTER", "SETSLOT", sB, "MIGRATING", dst.ID()).Error(); err != nil {
				t.Fatal(err)
			}
			args := []string{"EVAL", sharedAcquireScript.nodeText, "1", lockA,
				"me", "", "10000", "a", "s", lockA, lockB}
			res, rerr := src.Do(ctx, args...).ToAny()
			stable()
			a, aerr := src.Do(ctx, "EXISTS", lockA).AsInt64()
			sa, _ := src.Do(ctx, "EXISTS", setA).AsInt64()
			b, _ := src.Do(ctx, "GET", lockB).ToString()
			t.Logf("shared_acquire [A, B] with B's slot %s migrating: %v %v; A exists %d (%v), its set %d; B = %q", sB, res, rerr, a, aerr, sa, b)
			if rerr == nil {
				t.Fatalf("the call succeeded (%v): the case did not arise (no refusal of B's holders set)", res)
			}
			if aerr != nil || a != 0 || sa != 0 {
				t.Errorf("the refused call left A written (lock key %d, holders set %d): it wrote before the refusal", a, sa)
			}
			if b != tc.b {
				t.Errorf("the refused call changed B to %q (was %q)", b, tc.b)
			}
			for _, k := range []string{lockA, setA, lockB, setB} {
				_ = src.Do(ctx, "DEL", k).Error()
			}
		})
	}
}
