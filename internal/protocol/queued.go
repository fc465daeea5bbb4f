package protocol

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Queuer is a Strategy whose waiters wait by reservation (docs/design.md,
// "Waiting by reservation across processes"): a waiting acquisition holds
// no lock key; it reserves the keys it can and stands in the queue of the
// others, and it is granted by a confirm, an all-or-nothing attempt that
// takes keys free, reserved for it or its own.
type Queuer interface {
	Strategy
	// Contended reports whether a Lock should skip its first attempt and
	// reserve at once: where batches collide in Redis, a first attempt
	// that fails costs a round trip and holds keys others wait for until
	// the Reserve after it.
	Contended() bool
	// Met records whether an acquisition's first contact with Redis (its
	// first attempt, or the first Reserve of a Lock that skipped it) met
	// a key it could not take: what Contended decides by.
	Met(conflict bool)
	// Ticket returns a new acquisition's ticket: its age, the same in
	// every call it makes (an estimate of the servers' time; it decides
	// order only, never exclusion).
	Ticket(ctx context.Context) (string, error)
	// Listen delivers the messages addressed to the acquisition of r.Who
	// (a key handed to it, a request to yield one), n keys, until stop is
	// called. A message it cannot deliver is seen at the next refresh.
	Listen(r *Request, n int) (msgs <-chan Msg, stop func())
	// Reserve reserves (or queues for) every key of set; with leave, it
	// gives back every key reserved for or held by r.Who instead and
	// leaves every queue. seq numbers the acquisition's Reserve rounds
	// (1, 2, ... in the order they are sent): every reservation and queue
	// entry the round writes names it, and a key reserved for r.Who by a
	// later round is left alone (the guard of reserve.lua).
	Reserve(ctx context.Context, set *Set, r *Request, ticket string, seq int64, leave bool) Reservations
}

// Msg is a message to a waiting acquisition about one of its keys.
type Msg struct {
	Key   string // the lock key
	Yield bool   // asked to yield the key to an older waiter; else handed it
	// Seq, for a hand-off, names the call of the acquisition that created
	// the queue entry the release popped; 0 when the message has none (an
	// older version).
	Seq int64
}

// KeyReply is what one Reserve round learned of one key (reserve.lua's
// reply code). The zero value: the key's call failed with nothing
// written (an error reply, a moved slot), or a leave left the key.
type KeyReply struct {
	// Mine (code 0): the key is reserved for the acquisition now, by this
	// round's call.
	Mine bool
	// Entry (code e >= 1): the acquisition stands in the key's queue
	// under the entry its round Entry created; the key is not its own.
	Entry int64
	// Stale (code -1): the key is the acquisition's reservation of a
	// later round; the call left it alone.
	Stale bool
	// Unknown: the call's reply was lost (or its context ended first):
	// it may have run, or may still run, on the key.
	Unknown bool
}

// Reservations is the outcome of one Reserve.
type Reservations struct {
	// Keys[i] is what the round learned of key i.
	Keys []KeyReply
	// Deaf: messages cannot reach this acquisition (per-slot calls
	// cannot publish to an inbox of another slot; the server refused the
	// subscription): it refreshes at ReserveRefresh even with nothing
	// reserved.
	Deaf bool
	// Err joins the failures of calls (their keys read as not Mine).
	Err error
}

// QueuedRefresh is how often a waiter that has no key reserved (and whose
// messages can reach it) reserves again: the hand-off that makes a key
// its own sends a message, and this comes before that reservation would
// lapse (lockval.ReserveTTL) when the message is lost. It also bounds how
// late a waiter sees a key that went free without a message (an expiry).
const QueuedRefresh = 400 * time.Millisecond

// ReserveRefresh is how often a waiter by reservation reserves again,
// whatever messages say: it renews its reservations (whose expiry,
// lockval.ReserveTTL = 500 ms, bounds what a crashed waiter costs), its
// queue entries, takes free keys, finds keys handed to it whose message
// was lost, and yields keys an older waiter wants (rule Y). A third of the
// reservations' life: two refreshes can be late before one lapses.
const ReserveRefresh = 500 * time.Millisecond / 3

// The argument, beside docs/design.md's.
//
// Exclusion. A waiter by reservation is granted only by its confirm: an
// attempt whose script, on every node, checked every key before writing
// and took them only if each was free, reserved for it or its own (all or
// nothing, as TryLock), writing holds with the lease's TTL; Deadline is
// the confirm's send time plus the TTL, so a holder paused for less than
// its TTL keeps every key. It sends the confirm when its evidence
// (evidence.go: the replies of its rounds and the hand-off messages that
// name them) says every key is reserved for it; evidence that is wrong
// costs a failed confirm, never a grant. A round with an unknown outcome
// ends the token (ErrUnsettled): run late, it could give away a key the
// confirm took.
//
// No deadlock. A waiter by reservation holds no held key while it waits,
// except for the one call after its first attempt (or after a confirm
// that failed on some node), which waits for nothing: the Reserve that
// turns them into reservations (a plain lease's), or the release that
// gives them back (a reentrant lease's). A key its owner holds through
// another lease is that lease's hold, which it counts as its own and
// waits for in no way. A waiter never takes a key reserved for
// another. A wait-for edge X -> Y through a reservation of Y with X older
// ends within one message (or ReserveRefresh) plus a round trip, because
// Y's next Reserve hands the key to the oldest waiter in line (rule Y),
// unless Y is granted, and a granted lease waits for nothing. So a cycle
// that lasts has only edges towards older waiters, and tickets are a total
// order, the same in every call: there is none. A reader's shared key
// held by others that counts as its own is not reserved: nobody waits for
// it. Waiters that keep a prefix (the pipeline strategy, permits, a
// churning map) give their whole prefix
// back before they wait for a reserved key (Conflict.Reserved), so they
// hold nothing any waiter by reservation can wait for while they wait for
// one.
//
// Wait bound. The oldest waiter's reservations are never taken, keys
// released in front of it are handed to it, and younger waiters yield to
// it: it is granted within the longest remaining hold of its keys plus a
// yield (a message, or ReserveRefresh) and two round trips.

// lockByReservation continues Lock for an acquisition whose first attempt
// (a) did not take every key, or that skipped it (Contended): it waits by
// reservation until its evidence (evidence.go) says every key is reserved
// for it, and is then granted by its confirm, or until ctx ends. A first
// round of one that skipped its attempt tells the Queuer whether it met
// contention (Met): it found every key free, or not.
func lockByReservation(ctx context.Context, s Queuer, q *acquisition, ticket string, skipped bool) (Grant, error) {
	set, r := q.set, q.r
	n := set.Len()
	msgs, stop := s.Listen(r, n)
	defer stop()
	var index map[string]int // lock key -> set index, built on the first message

	// The evidence (evidence.go) of which keys are reserved for this
	// acquisition: replies of its rounds, and hand-offs that name the
	// round whose queue entry they popped. Rounds are numbered in the
	// order they are sent, one at a time (lockval.MaxSeq is out of reach).
	// It is never granted with its keys in reserved form: a reservation
	// lives lockval.ReserveTTL, a lease holds its keys for its TTL
	// (TestAPausedGranteeKeepsItsKeys).
	ws := newWaitState(n)
	// A waiter by reservation holds nothing while it waits. A plain one's
	// keys (its first attempt's, a failed confirm's) become reservations
	// in its next round; a reentrant one's are in its owner's form, which
	// reserve.lua leaves alone (it may be another lease's hold too), and a
	// request's shared holds are shared with others: those go back
	// (release.lua leaves the owner's other holds).
	holdNothing := func() error {
		if r.Who.Lease == "" && set.Plain() {
			return nil
		}
		return q.rollback(ctx)
	}
	leave := func(cause error) (Grant, error) {
		cause = errors.Join(cause, holdNothing())
		lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.CleanupTimeout)
		defer cancel()
		res := s.Reserve(lctx, set, r, ticket, ws.send(), true)
		if r.Stats != nil {
			r.Stats.Rollbacks++
			if res.Err != nil {
				r.Stats.RollbackErr = res.Err
			}
		}
		if res.Err != nil {
			return Grant{}, errors.Join(cause, &Wrapped{Msg: "leave (reservations expire by themselves, held keys by their TTL)", Err: res.Err})
		}
		return Grant{}, cause
	}

	if err := holdNothing(); err != nil {
		return leave(err)
	}
	timer := time.NewTimer(ReserveRefresh)
	defer timer.Stop()
	reserve, errs := true, 0
	// failed counts confirms that failed with no wait between them: a
	// reserve round that keeps proving keys a confirm keeps refusing (the
	// scripts disagreeing on whose a key is) must not spin at the round
	// trip's pace. One failure is ordinary (a reservation lapsed); from
	// the second on, the next confirm waits a pause (Backoff), taken after
	// the reserve round that turned what the failed one took into
	// reservations, so that nothing is held in the pause.
	failed := 0
	for {
		if ctx.Err() != nil {
			return leave(context.Cause(ctx))
		}
		if reserve {
			seq := ws.send()
			res := s.Reserve(ctx, set, r, ticket, seq, false)
			ws.reply(seq, res)
			if ctx.Err() != nil {
				return leave(context.Cause(ctx))
			}
			if UnknownOutcome(res.Err) {
				// A Reserve run late, after a later call of this waiter
				// (a confirm that granted), could hand a key of the
				// lease to an older waiter: not under this token. (The
				// guard of reserve.lua covers reservations only, and rule
				// L only the evidence: a key in held form, such as the
				// first attempt's, is covered by neither.)
				return leave(fmt.Errorf("%w: %w", ErrUnsettled, res.Err))
			}
			if res.Err != nil {
				if !Transient(res.Err) {
					return leave(res.Err)
				}
				errs++
				if err := SleepCtx(ctx, Backoff(errs)); err != nil {
					return leave(err)
				}
				continue
			}
			errs = 0
			reserve = false
			if skipped && seq == 1 {
				// This round was the acquisition's first contact: what
				// it found held counts as an attempt's conflicts would.
				s.Met(!ws.ready())
				r.Stats.queuedBehind(res)
			}
			next := QueuedRefresh
			if res.Deaf || ws.anyMine() {
				next = ReserveRefresh
			}
			timer.Reset(next)
		}
		// Every key proved reserved: the confirm takes them.
		if ws.ready() {
			if failed > 1 {
				if err := SleepCtx(ctx, Backoff(failed)); err != nil {
					return leave(err)
				}
			}
			t0 := time.Now()
			a := s.Attempt(ctx, set, 0, r, AttemptOptions{Mode: Confirm, Ticket: ticket})
			r.Stats.attempt(&a)
			q.record(&a, 0, t0)
			if a.FirstFailure(0) == n {
				g, bad, err := q.finish(ctx, &a, t0)
				if bad == n {
					return g, err
				}
			}
			if a.Err != nil && !Transient(a.Err) {
				return leave(a.Err)
			}
			// A reservation lapsed or went to an older waiter: what the
			// confirm took on other nodes goes back to reservations in
			// the next Reserve, at once.
			ws.confirmFailed()
			if err := holdNothing(); err != nil {
				return leave(err)
			}
			failed++
			reserve = true
			continue
		}
		failed = 0
		w0 := r.Stats.now()
		select {
		case m := <-msgs:
			if index == nil {
				index = make(map[string]int, n)
				for i, k := range set.Lock {
					index[k] = i
				}
			}
			if i, ok := index[m.Key]; ok {
				switch {
				case m.Yield:
					reserve = true // the Reserve yields it (rule Y)
				case m.Seq == 0:
					// An older version's hand-off names no round (rule
					// E0): a hint, which a round turns into evidence.
					reserve = true
				default:
					// A stale one (rule F, rule L) is dropped: the reply
					// that made it stale already said where the key
					// stands.
					ws.handOff(i, m.Seq)
				}
			}
		case <-timer.C:
			reserve = true
		case <-ctx.Done():
			r.Stats.waited(w0)
			return leave(context.Cause(ctx))
		}
		r.Stats.waited(w0)
	}
}
