package protocol

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/slotlock/slotlock/slot"
)

// metQueuer is a Queuer over one key that records what the protocol tells
// it of first contacts (Met). Its first attempt conflicts when conflict is
// set; a Reserve round 1 finds the key queued for (entry 1, and sends the
// hand-off that makes it the waiter's) when queued is set, free otherwise;
// every confirm takes the key.
type metQueuer struct {
	contended, conflict, queued bool
	msgs                        chan Msg
	met                         []bool
}

func (f *metQueuer) Attempt(_ context.Context, set *Set, _ int, _ *Request, opt AttemptOptions) Attempt {
	a := Attempt{State: make([]KeyState, set.Len())}
	if opt.Mode != Confirm && f.conflict {
		a.Conflicts = []Conflict{{Index: 0, TTL: time.Second}}
		return a
	}
	a.State[0] = Held
	return a
}

func (f *metQueuer) Release(context.Context, *Set, []int, Who) OwnerResult { return OwnerResult{} }
func (f *metQueuer) Extend(context.Context, *Set, []int, Who, time.Duration) OwnerResult {
	return OwnerResult{}
}
func (f *metQueuer) Wait(context.Context, *Set, int, Conflict, *Request, int, time.Duration) error {
	return nil
}
func (f *metQueuer) RefreshesHeld() bool                                 { return true }
func (f *metQueuer) Contended() bool                                     { return f.contended }
func (f *metQueuer) Met(conflict bool)                                   { f.met = append(f.met, conflict) }
func (f *metQueuer) Ticket(context.Context) (string, error)              { return "1", nil }
func (f *metQueuer) Listen(*Request, int) (msgs <-chan Msg, stop func()) { return f.msgs, func() {} }

func (f *metQueuer) Reserve(_ context.Context, set *Set, _ *Request, _ string, seq int64, leave bool) Reservations {
	out := Reservations{Keys: make([]KeyReply, set.Len())}
	switch {
	case leave:
	case seq == 1 && f.queued:
		out.Keys[0].Entry = 1
		f.msgs <- Msg{Key: set.Lock[0], Seq: 1} // handed on: read after this reply
	default:
		out.Keys[0].Mine = true
	}
	return out
}

// TestMetReportsTheFirstContact: the protocol tells the Queuer, once per
// acquisition, whether its first contact with Redis met a key it could
// not take: the first attempt's outcome (Lock, TryLock), or, for a Lock
// that skipped it (Contended), its first Reserve round's; a Lock that
// attempted first reports nothing more from its rounds. Mutations
// checked: the round's report inverted, and a report from every first
// round.
func TestMetReportsTheFirstContact(t *testing.T) {
	names, err := slot.NewNamer("t")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name                        string
		try                         bool
		contended, conflict, queued bool
		want                        []bool
	}{
		{name: "attempt-free", want: []bool{false}},
		{name: "attempt-held", conflict: true, queued: true, want: []bool{true}},
		{name: "skipped-free", contended: true, want: []bool{false}},
		{name: "skipped-held", contended: true, queued: true, want: []bool{true}},
		{name: "trylock-free", try: true, want: []bool{false}},
		{name: "trylock-held", try: true, conflict: true, want: []bool{true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &metQueuer{contended: tc.contended, conflict: tc.conflict, queued: tc.queued, msgs: make(chan Msg, 4)}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			r := &Request{Who: Who{Holder: "w"}, TTL: 10 * time.Second, CleanupTimeout: time.Second}
			set := NewSet(names, []string{"k"})
			if tc.try {
				_, err = TryLock(ctx, f, set, r)
				if tc.conflict != (err != nil) {
					t.Fatalf("TryLock: %v", err)
				}
			} else if _, err = Lock(ctx, f, set, r); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(f.met, tc.want) {
				t.Errorf("Met %v, want %v", f.met, tc.want)
			}
		})
	}
}
