package protocol

import (
	"context"
	"testing"
	"time"

	"github.com/slotlock/slotlock/slot"
)

// staleQueuer is a Queuer over one key whose waiter meets a stale
// hand-off (rule F, docs/design.md, "Waiting by reservation across
// processes"): round 1 queues it under entry 1,
// which a release pops (the hand-off naming round 1 is delayed), the
// reservation lapses unused and another takes the key; round 2 (sent on a
// yield request) finds the key taken and stands under a new entry, 2.
// The delayed hand-off arrives after round 2's reply. Round 3 finds the
// key free and reserves it.
type staleQueuer struct {
	msgs     chan Msg
	reserved bool // the key is reserved for the waiter (round 3 on)
	confirms int  // confirm attempts sent
}

func (f *staleQueuer) Attempt(_ context.Context, set *Set, _ int, _ *Request, opt AttemptOptions) Attempt {
	a := Attempt{State: make([]KeyState, set.Len())}
	if opt.Mode != Confirm {
		panic("only confirms expected: Contended skips the first attempt")
	}
	f.confirms++
	if f.reserved {
		a.State[0] = Held
	} else {
		a.Conflicts = []Conflict{{Index: 0, TTL: time.Second}}
	}
	return a
}

func (f *staleQueuer) Release(context.Context, *Set, []int, Who) OwnerResult { return OwnerResult{} }
func (f *staleQueuer) Extend(context.Context, *Set, []int, Who, time.Duration) OwnerResult {
	return OwnerResult{}
}
func (f *staleQueuer) Wait(context.Context, *Set, int, Conflict, *Request, int, time.Duration) error {
	return nil
}
func (f *staleQueuer) Leave(context.Context, *Set, int, *Request)          {}
func (f *staleQueuer) RefreshesHeld() bool                                 { return true }
func (f *staleQueuer) Contended() bool                                     { return true }
func (f *staleQueuer) Met(bool)                                            {}
func (f *staleQueuer) Ticket(context.Context) (string, error)              { return "1", nil }
func (f *staleQueuer) Listen(*Request, int) (msgs <-chan Msg, stop func()) { return f.msgs, func() {} }

func (f *staleQueuer) Reserve(_ context.Context, set *Set, _ *Request, _ string, seq int64, leave bool) Reservations {
	out := Reservations{Keys: make([]KeyReply, set.Len())}
	switch {
	case leave:
	case seq == 1:
		out.Keys[0].Entry = 1
		f.msgs <- Msg{Key: set.Lock[0], Yield: true} // ask for round 2 at once
	case seq == 2:
		out.Keys[0].Entry = 2
		f.msgs <- Msg{Key: set.Lock[0], Seq: 1} // read after this reply
	default:
		f.reserved = true
		out.Keys[0].Mine = true
	}
	return out
}

// TestStaleHandOffCostsNoConfirm: a hand-off naming an entry older than
// the one the waiter's last reply reported is stale (rule F): the waiter
// drops it and confirms once, after the round that reserves the key
// (QueuedRefresh later), plain or fenced. Read as a hint it would cost a
// confirm that fails. Mutation checked: handOff accepting every message
// naming a sent round (2 confirms).
func TestStaleHandOffCostsNoConfirm(t *testing.T) {
	names, err := slot.NewNamer("t")
	if err != nil {
		t.Fatal(err)
	}
	for _, fenced := range []bool{true, false} {
		set := NewSet(names, []string{"k"})
		f := &staleQueuer{msgs: make(chan Msg, 4)}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		r := &Request{Who: Who{Holder: "w"}, TTL: 10 * time.Second, CleanupTimeout: time.Second, Fencing: fenced}
		_, err := Lock(ctx, f, set, r)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		if f.confirms != 1 || !f.reserved {
			t.Errorf("fenced %v: %d confirms, reserved before the confirm %v: want 1 confirm after round 3 reserved the key", fenced, f.confirms, f.reserved)
		}
	}
}
