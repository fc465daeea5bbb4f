package redistest

import (
	"context"
	"testing"
	"time"
)

// TestMoveSlotBackAndForth moves one slot around the masters, back to
// back. Each move must leave every node agreeing on the owner for good: a
// node that knew the new owner by its old config epoch used to let a late
// gossip message of the previous owner take the slot back after MoveSlot
// had returned, and the next move then failed ("I'm not the owner").
func TestMoveSlotBackAndForth(t *testing.T) {
	c := StartForTest(t, Options{Replicas: NoReplicas})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	masters, err := c.Masters(ctx)
	if err != nil {
		t.Fatal(err)
	}
	const slot = 16024
	for round := range 40 {
		owner, err := c.NodeForSlot(ctx, slot)
		if err != nil {
			t.Fatal(err)
		}
		to := masters[(round+1)%len(masters)]
		if owner == to {
			to = masters[(round+2)%len(masters)]
		}
		if err := c.MoveSlot(ctx, slot, to); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		for _, n := range c.liveNodes() {
			shards, err := parseShards(n.Do(ctx, "CLUSTER", "SHARDS"))
			if err != nil {
				t.Fatal(err)
			}
			for _, sh := range shards {
				if m, ok := sh.master(); ok && sh.owns(slot) && m.id != to.id {
					t.Fatalf("round %d: %s routes slot %d to %.8s, not %s", round, n.Addr(), slot, m.id, to.Addr())
				}
			}
		}
	}
}
