package protocol

// The waiter's evidence: what a waiter by reservation knows of each of its
// keys, from the replies of its own Reserve rounds and from the hand-off
// messages that name the queue entry they popped, and when that is enough
// to send the confirm. It is pure (no I/O), so that every ABA case is a
// table test (evidence_test.go).
//
// The evidence decides only WHEN to confirm: the confirm (acquire.lua mode
// 'c') checks every key on the server and takes them all or none, so
// evidence that is wrong costs a failed confirm, never a grant. What the
// rules buy is that a waiter confirms once, when every key is in fact
// reserved for it, instead of confirming on every message. Rule F drops a
// message naming a queue entry that a later reply showed gone; rule I
// waits for the round in flight; rule L drops evidence a round with an
// unknown outcome may have undone (lockByReservation also ends the token
// after such a round: ErrUnsettled).

// keyEvidence is what one acquisition knows of one key.
type keyEvidence struct {
	// seq is the round the evidence names (0: the key is not known to be
	// the acquisition's): the round whose reply said it reserved the key,
	// or the round that created the queue entry a hand-off popped.
	seq int64
	// floor: a hand-off naming an entry created before floor is stale
	// (rule F). seq is never below it.
	floor int64
	// lost is the highest round whose outcome for this key is unknown
	// (rule L): evidence naming an earlier round is dropped and not
	// accepted again, since that round may still run and give the key
	// away.
	lost int64
}

// waitState is the evidence of one acquisition by reservation.
type waitState struct {
	next     int64 // the seq of the next round (rounds are numbered from 1)
	inflight bool  // a round is out (rule I: no confirm meanwhile)
	keys     []keyEvidence
}

func newWaitState(n int) *waitState {
	return &waitState{next: 1, keys: make([]keyEvidence, n)}
}

// send numbers a round about to be sent and returns its seq.
func (w *waitState) send() int64 {
	seq := w.next
	w.next++
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
			ev.seq, ev.floor = seq, max(ev.floor, seq)
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
// evidence. A message naming no round sent yet, or one below the key's
// floor (rule F) or its lost round (rule L), is stale: dropped.
func (w *waitState) handOff(i int, s int64) bool {
	ev := &w.keys[i]
	if s < 1 || s >= w.next || s < ev.floor || s < ev.lost {
		return false
	}
	if s > ev.seq {
		ev.seq, ev.floor = s, max(ev.floor, s)
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

// ready reports whether the confirm is due: no round is out (rule I) and
// every key is proved reserved for the acquisition.
func (w *waitState) ready() bool {
	if w.inflight || len(w.keys) == 0 {
		return false
	}
	for _, ev := range w.keys {
		if ev.seq == 0 {
			return false
		}
	}
	return true
}
