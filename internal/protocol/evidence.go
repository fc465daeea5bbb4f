package protocol

import (
	"time"

	"github.com/slotlock/slotlock/internal/lockval"
)

// The waiter's evidence (docs/proposals/direct-grant.md, section 2): what
// a waiter by reservation knows of each of its keys, from the replies of
// its own Reserve rounds and from the hand-off messages that name the
// queue entry they popped, and the decision it takes from that. It is
// pure (no I/O, the clock passed in), so that every ABA case of the
// specification's table 2.4 is a table test (evidence_test.go).
//
// A waiter whose every key is proved reserved for it is granted directly
// (no confirm; Deadline = the reservations' lower-bound expiry), or, when
// its lease needs a script at the grant (fences, MinReplicas) or the
// evidence is too old (rule M), by the confirm (acquire.lua mode 'c'). A
// stale message (rule F, rule L) triggers neither. Rule L is a second
// line: lockByReservation ends the token after any round with an unknown
// outcome (ErrUnsettled), so no evidence it drops is ever used today.

// keyEvidence is what one acquisition knows of one key.
type keyEvidence struct {
	// seq is the round the evidence names (0: the key is not known to be
	// the acquisition's): the round whose reply said it reserved the key,
	// or the round that created the queue entry a hand-off popped.
	seq int64
	// basis is the send time of round seq: the reservation was written no
	// earlier, so it expires no earlier than basis + ReserveTTL.
	basis time.Time
	// floor: a hand-off naming an entry created before floor is stale
	// (rule F). seq is never below it.
	floor int64
	// lost is the highest round whose outcome for this key is unknown
	// (rule L): evidence naming an earlier round is dropped and not
	// accepted again, since that round may still run and give the key
	// away.
	lost int64
	// entry is the queue entry the latest reply reported the acquisition
	// under (the round that created it), and entrySent the send time of
	// the latest round whose reply reported it: a hand-off of entry was
	// written after that (see reply).
	entry     int64
	entrySent time.Time
}

// waitState is the evidence of one acquisition by reservation.
type waitState struct {
	next     int64               // the seq of the next round (rounds are numbered from 1)
	sent     map[int64]time.Time // send time per round
	inflight bool                // a round is out (rule I: no grant meanwhile)
	keys     []keyEvidence
	ttl      time.Duration // R, lockval.ReserveTTL (a field for the tests' sake)
}

func newWaitState(n int) *waitState {
	return &waitState{next: 1, sent: map[int64]time.Time{}, keys: make([]keyEvidence, n), ttl: lockval.ReserveTTL}
}

// send numbers a round sent at `at` (taken before its first call goes
// out) and returns its seq.
func (w *waitState) send(at time.Time) int64 {
	seq := w.next
	w.next++
	w.sent[seq] = at
	w.inflight = true
	return seq
}

// reply applies what round seq learned of every key (after all its calls
// answered or its context ended).
func (w *waitState) reply(seq int64, res Reservations) {
	w.inflight = false
	for i := range w.keys {
		if i >= len(res.Keys) {
			break
		}
		k, ev := res.Keys[i], &w.keys[i]
		switch {
		case k.Mine:
			// Reserved by round seq: written no earlier than its send.
			ev.seq, ev.basis, ev.floor = seq, w.sent[seq], max(ev.floor, seq)
		case k.Entry > 0:
			// Rule F: when round seq ran, the key was not the
			// acquisition's and its one entry in the key's queue was
			// Entry. Evidence naming another round described a state
			// that had ended by then (an earlier entry was popped, or a
			// reservation was given away or lapsed); only a hand-off of
			// Entry itself, after the round ran, can still be true.
			ev.floor = max(ev.floor, k.Entry)
			if ev.seq != k.Entry {
				ev.seq = 0
			}
			// And the entry was still in the queue when round seq ran:
			// one entry is popped once, so a hand-off of it (which
			// writes the reservation with PX R) comes after that run,
			// hence after round seq's send. A refresh that keeps an old
			// entry thus moves the lower bound on its hand-off's write up
			// to the refresh (without it, a waiter whose entry is older
			// than about R would always confirm: rule M).
			if ev.entry != k.Entry {
				ev.entry, ev.entrySent = k.Entry, time.Time{}
			}
			if t := w.sent[seq]; t.After(ev.entrySent) {
				ev.entrySent = t
			}
			if ev.seq == k.Entry && ev.entrySent.After(ev.basis) {
				ev.basis = ev.entrySent // the hand-off came before this reply
			}
		case k.Unknown:
			// Rule L: the call may still run, and give away a
			// reservation of an earlier round (the guard of reserve.lua
			// protects only later ones).
			ev.lost = max(ev.lost, seq)
			if ev.seq < seq {
				ev.seq = 0
			}
		}
		// Stale (a later round wrote the key: its own reply or message
		// carries the evidence) and failed calls (nothing written) change
		// nothing.
	}
}

// handOff applies a hand-off message for key i naming round s, the round
// that created the popped entry, and reports whether it was accepted as
// evidence. A message naming no round of this acquisition, or one below
// the key's floor (rule F) or its lost round (rule L), is stale: dropped.
func (w *waitState) handOff(i int, s int64) bool {
	ev := &w.keys[i]
	sent, ok := w.sent[s]
	if !ok || s < ev.floor || s < ev.lost {
		return false
	}
	if s > ev.seq {
		if ev.entry == s && ev.entrySent.After(sent) {
			sent = ev.entrySent // a later round saw entry s still queued
		}
		ev.seq, ev.basis, ev.floor = s, sent, max(ev.floor, s)
	}
	return true
}

// confirmFailed forgets every key's evidence: a confirm that did not
// grant found some key not reserved for the acquisition, and what it took
// on other nodes goes back to reservations in the next round.
func (w *waitState) confirmFailed() {
	for i := range w.keys {
		w.keys[i].seq = 0
	}
}

// anyMine reports whether some key has evidence (the refresh is then
// ReserveRefresh: the acquisition renews what it holds).
func (w *waitState) anyMine() bool {
	for _, ev := range w.keys {
		if ev.seq > 0 {
			return true
		}
	}
	return false
}

// verdict is what the acquisition does next.
type verdict uint8

const (
	// keepWaiting: some key is not proved the acquisition's, or a round
	// is out.
	keepWaiting verdict = iota
	// confirm: every key is proved the acquisition's; the confirm round
	// takes them (today's grant).
	confirm
	// grantDirect: every key is proved the acquisition's until at least
	// the deadline decide returns, far enough ahead (rule M): granted
	// with no further call.
	grantDirect
)

// deadline returns the lower bound on the expiry of every key's
// reservation, min over keys of basis + ReserveTTL, and false when some
// key has no evidence.
func (w *waitState) deadline() (time.Time, bool) {
	var d time.Time
	for i, ev := range w.keys {
		if ev.seq == 0 {
			return time.Time{}, false
		}
		if e := ev.basis.Add(w.ttl); i == 0 || e.Before(d) {
			d = e
		}
	}
	return d, len(w.keys) > 0
}

// decide returns what to do at now (docs/proposals/direct-grant.md, 2.3):
// nothing while a round is out (rule I) or a key lacks evidence; with
// every key proved, a direct grant with the returned deadline when direct
// (the lease may be granted so, 2.6) and the deadline is at least
// ReserveTTL/4 ahead (rule M: the lease's conversion is due ReserveTTL/4
// after the grant or ReserveTTL/4 before the deadline, whichever comes
// first, and is retried every ReserveTTL/16 until the deadline: at least
// four tries), else the confirm. (The specification said R/2 and a
// conversion at R/4 after the grant only: waiters that waited longer than
// about a refresh then always confirmed, 5 of 200 grants direct in
// TestNoFalseLossInReservedForm's shape, where a confirm on the critical
// path costs more than an early conversion off it.)
func (w *waitState) decide(now time.Time, direct bool) (verdict, time.Time) {
	if w.inflight {
		return keepWaiting, time.Time{}
	}
	d, ok := w.deadline()
	if !ok {
		return keepWaiting, time.Time{}
	}
	if direct && d.Sub(now) >= w.ttl/4 {
		return grantDirect, d
	}
	return confirm, time.Time{}
}
