package protocol

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Strategy is what a lock strategy offers the protocol: one attempt, an
// owner-checked release and extension of some keys, and a wait for one key.
// Everything else (which keys an acquisition keeps, what it gives back,
// when it waits, gives up or retries) is decided here, once.
type Strategy interface {
	// Attempt tries to take keys from..Len()-1 of set. With Prefix, each
	// node takes its keys up to its first conflict; with AllOrNothing,
	// all of a node's keys or none. A key the lease already holds counts
	// as taken. An error reply means the command that got it wrote
	// nothing; a lost reply leaves its keys Unknown.
	Attempt(ctx context.Context, set *Set, from int, r *Request, opt AttemptOptions) Attempt
	// Release deletes, owner-checked, the keys idx (ascending; nil: all)
	// that who still holds, and says which were no longer held and which
	// it could not settle.
	Release(ctx context.Context, set *Set, idx []int, who Who) OwnerResult
	// Extend gives the keys idx (ascending) a new expiry of ttl,
	// owner-checked, likewise.
	Extend(ctx context.Context, set *Set, idx []int, who Who, ttl time.Duration) OwnerResult
	// Wait returns when key i, held by another (c), may be free or handed
	// to r.Who, or after at most limit; context.Cause(ctx) when ctx ends
	// first (then anything the wait left in Redis is cleaned up within
	// r.CleanupTimeout). attempt counts the waits for the same key.
	Wait(ctx context.Context, set *Set, i int, c Conflict, r *Request, attempt int, limit time.Duration) error
	// RefreshesHeld reports whether an attempt that finds a key the lease
	// holds gives it the attempt's expiry (the Lua scripts do; SET NX
	// cannot). If it does, every attempt sends every key, and the keys
	// end with the last attempt's expiry at no extra cost; if not,
	// attempts start at the first key not yet held, and the protocol
	// renews the kept keys itself while it waits and at the grant.
	RefreshesHeld() bool
}

// The guarantees, and why they hold.
//
// All or nothing. An acquisition returns with every key held or with none
// held by it. Every key an attempt may have written (Held, Kept or Unknown)
// is remembered as touched until an owner-checked release says it is gone;
// on any failure the touched keys are released, owner-checked, on a
// context detached from the caller's and bounded by Request.CleanupTimeout.
// A key whose rollback cannot reach its node stays until its TTL, carrying
// a token nobody else has.
//
// No deadlock. Lock takes keys in canonical order (slot, then bytes: a
// total order that does not depend on the topology). After each attempt,
// the first key f not held decides: everything held above f is given back
// (trim) before the wait can matter, and the lease waits for f only. So a
// waiter only ever holds keys below the one it waits for. A cycle of
// waiters would need each to hold a key below the one it waits for and
// above the one the next waits for; the order is total, so there is none.
// The trim waits for nothing: it is an owner-checked release, which no
// lock can block.
//
// No livelock, no starvation by smaller batches. A waiter keeps its prefix
// (the keys below f), and each attempt can only extend it, or find a kept
// key lost (expired, deleted by an operator): progress is monotone while
// the lease keeps its keys alive. It does: with RefreshesHeld every
// attempt re-expires the prefix, otherwise the protocol renews it once a
// third of the TTL has passed; and no wait is longer than a third of the
// TTL while a prefix is held.
//
// Across processes, a strategy that is a Queuer (the Lua engine, for
// leases of exclusive keys, plain or reentrant) keeps no prefix while it waits:
// after a first attempt that did not take every key it waits by
// reservation (queued.go, with its own argument), holding no key. A waiter
// that keeps a prefix (the pipeline strategy, requests with shared keys
// or permits, Lua waits while the slot map moves) gives all of it back before it
// waits for a key reserved for such a waiter (Conflict.Reserved), so the
// argument above never has to cover an edge through a reservation: a
// prefix waiter holds nothing while it waits for one.
// Lua waiters that keep a prefix also stand in a line per key (docs/design.md,
// "Waiting in line across processes"): a release hands the key to the
// oldest live waiter as a short reservation, which no one else takes and
// which expires by itself. The pipeline strategy has no line: its waiters
// race, as before.

// maxTopologyRetries bounds TryLock's silent retries when a slot moved
// under it or a reply was lost: that is not a conflict, so it should not
// surface as one.
const maxTopologyRetries = 5

// acquisition is what one TryLock or Lock remembers between attempts.
type acquisition struct {
	s    Strategy
	set  *Set
	r    *Request
	keys []memo // per key of set
	// With MinReplicas: acked[i] is how many replicas acknowledged the
	// write that last gave key i its expiry (-1: enough), on master
	// node[i].
	acked []int
	node  []string
}

// memo is what an acquisition remembers of one key.
type memo struct {
	// since is a moment before the key last got its expiry, for a key
	// that may be the lease's (zero otherwise).
	since time.Time
	// touched: an attempt may have written the key and no release has
	// cleared it since; what a rollback must cover.
	touched bool
}

func newAcquisition(s Strategy, set *Set, r *Request) *acquisition {
	n := set.Len()
	q := &acquisition{s: s, set: set, r: r, keys: make([]memo, n)}
	if r.MinReplicas > 0 {
		q.acked, q.node = make([]int, n), make([]string, n)
		for i := range q.acked {
			q.acked[i] = -1
		}
	}
	return q
}

// record notes what attempt a, sent at t0 over keys from.., did.
func (q *acquisition) record(a *Attempt, from int, t0 time.Time) {
	for i := from; i < len(a.State); i++ {
		switch a.State[i] {
		case NotHeld:
			continue
		case Held:
			q.keys[i].since = t0
			if q.acked != nil && i < len(a.Node) {
				q.acked[i], q.node[i] = -1, a.Node[i]
				if acked, ok := a.Short[a.Node[i]]; ok {
					q.acked[i] = acked
				}
			}
		case Kept, Unknown:
			if q.keys[i].since.IsZero() {
				q.keys[i].since = t0 // a lost reply: the write, if it ran, ran after t0
			}
		}
		q.keys[i].touched = true
	}
}

// renew gives the keys idx the TTL again (owner-checked) and returns the
// smallest index it could not confirm as still the lease's (Len() when
// all were), and the error it met.
func (q *acquisition) renew(ctx context.Context, idx []int) (int, error) {
	if len(idx) == 0 {
		return q.set.Len(), nil
	}
	t := time.Now()
	res := q.s.Extend(ctx, q.set, idx, q.r.Who, q.r.TTL)
	bad := q.set.Len()
	if len(res.Lost) > 0 {
		bad = res.Lost[0]
	}
	if len(res.Failed) > 0 {
		bad = min(bad, res.Failed[0])
	}
	for _, i := range idx {
		if !slices.Contains(res.Lost, i) && !slices.Contains(res.Failed, i) {
			q.keys[i].since = t
		}
	}
	return bad, res.Err
}

// finish turns an attempt at t0 that holds every key into a Grant. Keys
// kept from earlier attempts are renewed first, so that every key expires
// no earlier than t0 plus the TTL. It returns the first key found lost by
// that renewal (or Len()) and its error.
func (q *acquisition) finish(ctx context.Context, a *Attempt, t0 time.Time) (Grant, int, error) {
	var old []int
	for i, k := range q.keys {
		if k.since.Before(t0) {
			old = append(old, i)
		}
	}
	if bad, err := q.renew(ctx, old); bad < q.set.Len() || err != nil {
		return Grant{}, bad, err
	}
	g := Grant{Deadline: t0.Add(q.r.TTL), Fences: a.Fences, At: t0}
	short := q.shortfalls()
	if len(short) == 0 {
		return g, q.set.Len(), nil
	}
	rerr := &ReplicaError{Want: q.r.MinReplicas, Shortfalls: short}
	if q.r.WarnOnReplicas {
		g.Warning = rerr
		return g, q.set.Len(), nil
	}
	return Grant{}, q.set.Len(), errors.Join(rerr, q.rollback(ctx))
}

// shortfalls gathers, per master, the fewest acknowledgements among the
// writes of the keys held.
func (q *acquisition) shortfalls() []ReplicaShortfall {
	var out []ReplicaShortfall
	for i, acked := range q.acked {
		if acked < 0 {
			continue
		}
		k := slices.IndexFunc(out, func(s ReplicaShortfall) bool { return s.Node == q.node[i] })
		if k < 0 {
			out = append(out, ReplicaShortfall{Node: q.node[i], Acked: acked})
		} else if acked < out[k].Acked {
			out[k].Acked = acked
		}
	}
	slices.SortFunc(out, func(x, y ReplicaShortfall) int { return strings.Compare(x.Node, y.Node) })
	return out
}

// touchedAbove returns the touched keys above f.
func (q *acquisition) touchedAbove(f int) []int {
	var out []int
	for i := f + 1; i < len(q.keys); i++ {
		if q.keys[i].touched {
			out = append(out, i)
		}
	}
	return out
}

// release gives back the keys idx, owner-checked, on a context detached
// from ctx and bounded by the cleanup timeout, and forgets them when the
// release answered for all of them.
func (q *acquisition) release(ctx context.Context, idx []int) error {
	if len(idx) == 0 {
		return nil
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), q.r.CleanupTimeout)
	defer cancel()
	if q.r.Stats != nil {
		q.r.Stats.Rollbacks++ // the trim runs alone: Lock waits for it before the next attempt
	}
	res := q.s.Release(rctx, q.set, idx, q.r.Who)
	for _, i := range idx {
		if slices.Contains(res.Failed, i) {
			continue // may still be ours: a later rollback tries again
		}
		q.keys[i] = memo{}
		if q.acked != nil {
			q.acked[i] = -1
		}
	}
	return res.Err
}

// rollback releases every touched key.
func (q *acquisition) rollback(ctx context.Context) error {
	if err := q.release(ctx, q.touchedAbove(-1)); err != nil {
		if q.r.Stats != nil {
			q.r.Stats.RollbackErr = err
		}
		return &Wrapped{Msg: "rollback (keys expire by their TTL)", Err: err}
	}
	return nil
}

// giveUp ends a failed acquisition: everything touched is rolled back.
func (q *acquisition) giveUp(ctx context.Context, cause error) (Grant, error) {
	return Grant{}, errors.Join(cause, q.rollback(ctx))
}

// TryLock makes one attempt to take every key of set, all or nothing: on
// any failure it releases, owner-checked, whatever the attempt took. A
// moved slot or a lost reply is retried (with the refreshed slot map, up to
// maxTopologyRetries times, and only once the rollback answered); a
// conflict is not: it comes back as a *ConflictError.
func TryLock(ctx context.Context, s Strategy, set *Set, r *Request) (Grant, error) {
	q := newAcquisition(s, set, r)
	for round := 0; ; round++ {
		t0 := time.Now()
		a := s.Attempt(ctx, set, 0, r, AttemptOptions{Mode: AllOrNothing, First: round == 0})
		r.Stats.attempt(&a)
		q.record(&a, 0, t0)
		if qs, ok := s.(Queuer); ok && round == 0 && a.Err == nil {
			qs.Met(a.FirstFailure(0) < set.Len()) // as Lock's first attempt
		}
		var err error
		if a.FirstFailure(0) == set.Len() {
			var g Grant
			var bad int
			if g, bad, err = q.finish(ctx, &a, t0); bad == set.Len() {
				return g, err
			}
		}
		rbErr := q.rollback(ctx)
		if len(a.Conflicts) > 0 {
			return Grant{}, errors.Join(conflictError(set, a.Conflicts), a.Err, err, rbErr)
		}
		if ctx.Err() != nil {
			return Grant{}, errors.Join(context.Cause(ctx), a.Err, err, rbErr)
		}
		failure := errors.Join(a.Err, err)
		if (failure == nil || Transient(failure)) && rbErr == nil && round < maxTopologyRetries {
			// A moved slot, a lost reply, or a key lost between the
			// attempt and its renewal: not a conflict; again, shortly.
			w0 := r.Stats.now()
			err := SleepCtx(ctx, Backoff(round))
			r.Stats.waited(w0)
			if err != nil {
				return Grant{}, err
			}
			continue
		}
		return Grant{}, errors.Join(failure, rbErr)
	}
}

// Lock takes every key of set, waiting as long as ctx allows, in canonical
// order (see the guarantees above).
func Lock(ctx context.Context, s Strategy, set *Set, r *Request) (Grant, error) {
	n := set.Len()
	q := newAcquisition(s, set, r)
	held := 0 // keys [0, held) are the lease's, as far as the last attempt knows
	// lastWait is the key the acquisition last waited for (-1: none):
	// waits counts the waits for it (the backoff's attempt).
	waits, lastWait := 0, -1
	giveUp := func(cause error) (Grant, error) { return q.giveUp(ctx, cause) }
	if qs, ok := s.(Queuer); ok && qs.Contended() {
		if ticket, err := qs.Ticket(ctx); err == nil {
			return lockByReservation(ctx, qs, q, ticket, true)
		}
	}
	for first := true; ; first = false {
		if ctx.Err() != nil {
			return giveUp(context.Cause(ctx))
		}
		from := held
		if s.RefreshesHeld() {
			from = 0
		} else if held > 0 && time.Since(q.oldest(held)) > r.TTL/3 {
			// A long wait: keep the prefix from expiring under us.
			bad, err := q.renew(ctx, set.All(0)[:held])
			if err != nil && !Transient(err) {
				return giveUp(err)
			}
			held = min(held, bad)
			from = held
		}
		t0 := time.Now()
		a := s.Attempt(ctx, set, from, r, AttemptOptions{Mode: Prefix, First: first})
		r.Stats.attempt(&a)
		q.record(&a, from, t0)
		f := a.FirstFailure(from)
		failure := a.Err
		if qs, ok := s.(Queuer); ok && first && failure == nil {
			qs.Met(f < n)
		}
		if f == n {
			g, bad, err := q.finish(ctx, &a, t0)
			if bad == n {
				return g, err
			}
			f, failure = bad, errors.Join(failure, err)
		}
		if failure != nil && !Transient(failure) {
			// A failure waiting will not fix (a refused script, a wrong
			// type at a lock key): give back all.
			return giveUp(failure)
		}
		if ctx.Err() != nil {
			return giveUp(errors.Join(context.Cause(ctx), failure))
		}
		if first {
			if qs, ok := s.(Queuer); ok {
				if ticket, err := qs.Ticket(ctx); err == nil {
					return lockByReservation(ctx, qs, q, ticket, false)
				}
				// No server time (a node unreachable): wait keeping a
				// prefix this time.
			}
		}

		// Give back what lies above the first failure; it runs while we
		// wait, since nothing it does can block on us. A key reserved for
		// a waiter by reservation (queued.go) is waited for holding
		// nothing: that waiter may be waiting for our prefix.
		c, conflict := conflictAt(a.Conflicts, f)
		above := q.touchedAbove(f)
		held = f
		if conflict && c.Reserved {
			above, held = q.touchedAbove(-1), 0
		}
		trimmed := make(chan struct{})
		var trimErr error
		go func() {
			defer close(trimmed)
			trimErr = q.release(ctx, above) // what it cannot release stays touched
		}()

		// No wait is longer than a third of the TTL while a prefix is
		// held: the prefix must not expire while we wait.
		limit := MaxWait
		if held > 0 {
			limit = max(r.TTL/3, time.Millisecond)
		}
		var werr error
		w0 := r.Stats.now()
		if conflict {
			if c.Index != lastWait {
				waits, lastWait = 0, c.Index
			}
			werr = s.Wait(ctx, set, c.Index, c, r, waits, limit)
		} else {
			// A moved slot, a lost reply or a lost prefix key at f: the
			// strategy refreshed its slot map; try again shortly.
			werr = SleepCtx(ctx, min(Backoff(waits), limit))
		}
		r.Stats.waited(w0)
		waits++
		<-trimmed
		if werr != nil {
			return giveUp(werr)
		}
		if UnknownOutcome(trimErr) {
			// The trim may run after the next attempt re-takes its keys,
			// and delete them under a granted lease: not under this token.
			return giveUp(fmt.Errorf("%w: %w", ErrUnsettled, trimErr))
		}
	}
}

// attempt counts attempt a; on a nil Stats it does nothing.
func (st *Stats) attempt(a *Attempt) {
	if st != nil {
		st.Attempts++
		st.Conflicts += len(a.Conflicts)
	}
}

// queuedBehind counts as conflicts the keys a first reserve round (of a
// Lock that skipped its attempt) found held: it queued behind them.
func (st *Stats) queuedBehind(res Reservations) {
	if st == nil {
		return
	}
	for _, k := range res.Keys {
		if k.Entry > 0 {
			st.Conflicts++
		}
	}
}

// now is the start of a wait, read only when counting.
func (st *Stats) now() time.Time {
	if st == nil {
		return time.Time{}
	}
	return time.Now()
}

// waited counts the wait that began at w0.
func (st *Stats) waited(w0 time.Time) {
	if st != nil {
		st.Waited += time.Since(w0)
	}
}

func conflictError(set *Set, cs []Conflict) *ConflictError {
	out := &ConflictError{Conflicts: make([]KeyConflict, len(cs))}
	for i, c := range cs {
		out.Conflicts[i] = KeyConflict{Key: set.Keys[c.Index].Name, TTL: c.TTL}
	}
	return out
}

func conflictAt(cs []Conflict, idx int) (Conflict, bool) {
	for _, c := range cs {
		if c.Index == idx {
			return c, true
		}
	}
	return Conflict{}, false
}

// oldest returns the earliest since of the keys [0, n).
func (q *acquisition) oldest(n int) time.Time {
	o := q.keys[0].since
	for _, k := range q.keys[1:n] {
		if k.since.Before(o) {
			o = k.since
		}
	}
	return o
}
