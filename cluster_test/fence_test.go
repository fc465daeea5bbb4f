package clustertest

import (
	"testing"
	"time"

	"github.com/slotlock/slotlock"
	"github.com/slotlock/slotlock/slot"
)

// TestFencingAcrossFailover: a replica promoted without the last counter
// increments of its slot (what asynchronous replication can lose, made
// certain here by deleting the counter on the new master) still hands out
// a token above every token of its deposed master, because its config
// epoch is in the token's high bits (batch/scripts/fence.lua). Mutation:
// drawing with INCR again gives token 1 after the failover and fails.
func TestFencingAcrossFailover(t *testing.T) {
	e := newEnv(t, 2*time.Minute)
	l := e.locker(e.client(), slotlock.Options{TTL: 10 * time.Second, Fencing: true})
	const key = "fence:failover"
	var before int64
	for range 3 {
		le, err := l.Lock(e.ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		before, _ = le.FencingToken(key)
		if err := le.Release(e.ctx); err != nil {
			t.Fatal(err)
		}
	}
	victim := e.master(e.ctx, key)
	oldEpoch, err := victim.ConfigEpoch(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if before>>32 != oldEpoch {
		t.Fatalf("token %d has epoch %d; its master %s has config epoch %d", before, before>>32, victim.Addr(), oldEpoch)
	}
	replicas, err := e.c.ReplicasOf(e.ctx, victim)
	if err != nil || len(replicas) == 0 {
		t.Fatalf("replicas of %s: %v %v", victim, replicas, err)
	}
	promoted := replicas[0]
	if err := e.c.Failover(e.ctx, promoted, ""); err != nil {
		t.Fatal(err)
	}
	newEpoch, err := promoted.ConfigEpoch(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	// The increments that never reached the replica: all of them.
	fk := e.names.FenceKey(slot.KeySlot(key))
	if n, err := promoted.Do(e.ctx, "DEL", fk).AsInt64(); err != nil || n != 1 {
		t.Fatalf("DEL %s on the promoted %s: %d, %v", fk, promoted.Addr(), n, err)
	}
	var after int64
	deadline := time.Now().Add(20 * time.Second)
	for {
		le, err := l.TryLock(e.ctx, key)
		if err == nil {
			after, _ = le.FencingToken(key)
			if err := le.Release(e.ctx); err != nil {
				t.Fatal(err)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no grant on the promoted %s: %v", promoted.Addr(), err)
		}
		time.Sleep(100 * time.Millisecond) // the client learns the new master
	}
	t.Logf("epoch %d -> %d: token %d before the failover, %d after", oldEpoch, newEpoch, before, after)
	if after <= before || after != newEpoch<<32+1 {
		t.Errorf("token %d after the failover (epoch %d), %d before (epoch %d): want %d", after, newEpoch, before, oldEpoch, newEpoch<<32+1)
	}
}

// TestCheckFencing runs the failover scenario's fencing checker on small
// histories with a known verdict, so that a checker that sees nothing
// cannot pass the scenario.
func TestCheckFencing(t *testing.T) {
	const e1, e2 = 3 << 32, 5 << 32
	mk := func(id int, call, granted, token int64) *hold {
		return &hold{ID: id, Keys: []string{"k"}, Fences: map[string]int64{"k": token}, Call: call, Granted: granted, End: granted + 5, EndRet: granted + 5, ended: true}
	}
	for _, tc := range []struct {
		name             string
		hs               []*hold
		deposed          map[int64]bool
		violations, stal int
	}{
		{"growing", []*hold{mk(1, 0, 1, e1+1), mk(2, 10, 11, e1+2), mk(3, 20, 21, e2+1)}, nil, 0, 0},
		{"twice", []*hold{mk(1, 0, 1, e1+1), mk(2, 10, 11, e1+1)}, nil, 1, 0},
		{"twice, overlapping", []*hold{mk(1, 0, 5, e1+1), mk(2, 1, 4, e1+1)}, nil, 1, 0},
		{"backwards in one epoch", []*hold{mk(1, 0, 1, e1+7), mk(2, 10, 11, e1+2)}, map[int64]bool{3: true}, 1, 0},
		{"deposed master after its successor", []*hold{mk(1, 0, 1, e2+1), mk(2, 10, 11, e1+9)}, map[int64]bool{3: true}, 0, 1},
		{"older epoch not deposed", []*hold{mk(1, 0, 1, e2+1), mk(2, 10, 11, e1+9)}, nil, 1, 0},
		{"concurrent, smaller", []*hold{mk(1, 0, 10, e1+5), mk(2, 5, 12, e1+2)}, nil, 0, 0},
	} {
		h := newHistory(newTimeline())
		h.hs = tc.hs
		got := h.checkFencing(tc.deposed)
		if len(got.Violations) != tc.violations || len(got.Stale) != tc.stal {
			t.Errorf("%s: %d violations, %d stale; want %d, %d (%v)", tc.name, len(got.Violations), len(got.Stale), tc.violations, tc.stal, got.Violations)
		}
	}
}
