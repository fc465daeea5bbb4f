package batch

import (
	"context"
	"testing"
	"time"

	"github.com/slotlock/slotlock/internal/redistest"
	"github.com/slotlock/slotlock/slot"
)

// TestConfirmOfALapsedKeyLeavesItsOwnEntry runs acquire.lua mode 'c' (the
// confirm of a waiter by reservation, node form, as the engine sends it)
// on a free key (the waiter's reservation lapsed) whose queue still holds
// the waiter's own entry, 'token/seq inbox' scored by its ticket (its reserve
// joined the line again before a late hand-off message made it confirm).
// The grant must leave that entry: left behind, it marks the grant, and
// the grant's release hands the key to an acquisition that is over, a
// reservation's life lost per hand-off until the entry's deadline. With
// another waiter in line the grant is marked and that waiter's entry
// stays; alone, the grant is unmarked and the queue is gone.
func TestConfirmOfALapsedKeyLeavesItsOwnEntry(t *testing.T) {
	c := redistest.Require(t, cluster)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	names, err := slot.NewNamer("cfl")
	if err != nil {
		t.Fatal(err)
	}
	const key, waiter, ticket, other = "k", "w1", "1000", "w2 inbox2"
	lock := names.LockKey(key)
	q := names.QueueKeyInSlot(key, slot.KeySlot(key))
	n, err := c.NodeForSlot(ctx, slot.KeySlot(key))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		others bool
	}{{"alone", false}, {"others-wait", true}} {
		t.Run(tc.name, func(t *testing.T) {
			// The waiter's entry under the inbox it gives now (with the
			// seq of the call that created it), and one under an inbox
			// of before a reshard, in an older version's form (no seq):
			// both are its own.
			setup := [][]string{{"DEL", lock, q},
				{"ZADD", q, ticket, waiter + "/3 inbox1"},
				{"ZADD", q, ticket, waiter + " inbox0"}}
			if tc.others {
				setup = append(setup, []string{"ZADD", q, "2000", other})
			}
			for _, cmd := range setup {
				if err := n.Do(ctx, cmd...).Error(); err != nil {
					t.Fatal(err)
				}
			}
			res, err := n.Do(ctx, "EVAL", acquireScript.nodeText, "1", lock,
				waiter, "", "30000", "c:"+ticket, lock).ToAny()
			if err != nil {
				t.Fatal(err)
			}
			v, _ := n.Do(ctx, "GET", lock).ToString()
			line, _ := n.Do(ctx, "ZRANGE", q, "0", "-1").AsStrSlice()
			t.Logf("confirm: %v; value %q, queue %q", res, v, line)
			want, wantLine := waiter, []string(nil)
			if tc.others {
				want, wantLine = waiter+"!", []string{other}
			}
			if v != want {
				t.Errorf("value %q, want %q (marked only when someone else waits)", v, want)
			}
			if !equalStrings(line, wantLine) {
				t.Errorf("queue %q: want %q (the waiter's own entries left)", line, wantLine)
			}
			_ = n.Do(ctx, "DEL", lock, q).Error()
		})
	}
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
