package slotlock

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/slotlock/slotlock/internal/lockval"
	"github.com/slotlock/slotlock/internal/protocol"
)

// watchdog is the one renewal loop of a Locker. Every period it extends all
// the leases that renew, in one pipelined round trip per node (their
// per-node extend scripts side by side), and notices the leases that were
// lost: a key found not held, or a deadline passed without a successful
// renewal. Leases that do not renew are only watched for their deadline.
// It starts with the first lease and stops with Locker.Close.
//
// Leases granted with their keys in reserved form (a direct grant,
// protocol.Grant.Reserved) have a deadline R/4 to R ahead (R =
// lockval.ReserveTTL), far inside the period: a second loop (convertLoop)
// sends their first renewal, the conversion, R/4 after each grant or R/4
// before its deadline if that comes first (Lease.conversionDue), batched
// like a tick, and retries a failed one every R/16 until the deadline,
// when the lease ends as lost (docs/design.md, "The direct grant"). The
// tick leaves them to it until the conversion has answered.
type watchdog struct {
	l *Locker
	// period is TTL/3 of the shortest TTL among the leases it has
	// renewed (Locker.Acquire takes a TTL per request): renewing a
	// longer lease more often costs a round trip, renewing a shorter one
	// too rarely would lose it. It only ever shrinks.
	period atomic.Int64

	mu      sync.Mutex
	leases  map[*Lease]struct{}
	started bool
	stopped bool
	stop    chan struct{}
	done    chan struct{}
	shrunk  chan struct{} // the period shrank: reset the timer now

	// convert holds the leases whose conversion is pending, each with
	// when it is due (under mu); convKick wakes convertLoop for a new
	// one. convertLoop starts with the first such lease.
	convert      map[*Lease]time.Time
	convStarted  bool
	convKick     chan struct{}
	convLoopDone chan struct{}
}

// convertAfter is when a lease in reserved form sends its conversion,
// after its grant, or before its deadline if that comes first
// (Lease.conversionDue): the deadline is at least R/4 after the grant (the
// waiter's rule M), so a lost reply is retried (convertRetry) at least
// three times within it; and a lease held for less than R/4 usually never
// sends one (the common case under contention: its release hands the keys
// on as they are).
const convertAfter = lockval.ReserveTTL / 4

// convertRetry is how soon a failed conversion is sent again.
const convertRetry = lockval.ReserveTTL / 16

func newWatchdog(l *Locker) *watchdog {
	w := &watchdog{
		l:      l,
		leases: make(map[*Lease]struct{}),
		stop:   make(chan struct{}),
		done:   make(chan struct{}),
		shrunk: make(chan struct{}, 1),

		convert:      make(map[*Lease]time.Time),
		convKick:     make(chan struct{}, 1),
		convLoopDone: make(chan struct{}),
	}
	w.period.Store(int64(max(l.opt.TTL/3, time.Millisecond)))
	return w
}

func (w *watchdog) every() time.Duration { return time.Duration(w.period.Load()) }

// fit makes the period short enough for a lease of ttl.
func (w *watchdog) fit(ttl time.Duration) {
	p := int64(max(ttl/3, time.Millisecond))
	for {
		old := w.period.Load()
		if p >= old {
			return
		}
		if w.period.CompareAndSwap(old, p) {
			select {
			case w.shrunk <- struct{}{}:
			default:
			}
			return
		}
	}
}

func (w *watchdog) add(le *Lease) {
	w.fit(le.req.TTL)
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped {
		return
	}
	w.leases[le] = struct{}{}
	if !w.started {
		w.started = true
		go w.run()
	}
	if at, ok := le.conversionDue(); ok {
		w.convert[le] = at
		if !w.convStarted {
			w.convStarted = true
			go w.convertLoop()
		}
		select {
		case w.convKick <- struct{}{}:
		default:
		}
	}
}

// remove forgets le: an ended lease (released, lost) sends nothing more,
// its conversion included.
func (w *watchdog) remove(le *Lease) {
	w.mu.Lock()
	delete(w.leases, le)
	delete(w.convert, le)
	w.mu.Unlock()
}

// close stops the loop and waits for it; leases stay as they are.
func (w *watchdog) close() {
	w.mu.Lock()
	if w.stopped {
		w.mu.Unlock()
		return
	}
	w.stopped = true
	started, convStarted := w.started, w.convStarted
	close(w.stop)
	w.mu.Unlock()
	if started {
		<-w.done
	}
	if convStarted {
		<-w.convLoopDone
	}
}

// retryAfterError is how soon a failed renewal is tried again: well within
// the TTL, so that a passing error (a failover, a dropped connection) does
// not cost the lease.
func (w *watchdog) retryAfterError() time.Duration {
	return max(w.every()/4, time.Millisecond)
}

func (w *watchdog) run() {
	defer close(w.done)
	t := time.NewTimer(w.every())
	defer t.Stop()
	for {
		select {
		case <-w.stop:
			return
		case <-w.shrunk:
			t.Reset(w.every())
		case <-t.C:
			next := w.every()
			if failed := w.tick(); failed {
				next = w.retryAfterError()
			}
			t.Reset(next)
		}
	}
}

// tick renews or checks every lease once; it reports whether a renewal
// failed for a reason other than a lost key.
func (w *watchdog) tick() (failed bool) {
	w.mu.Lock()
	all := make([]*Lease, 0, len(w.leases))
	for le := range w.leases {
		all = append(all, le)
	}
	w.mu.Unlock()

	now := time.Now()
	var renew []*Lease
	for _, le := range all {
		switch {
		case le.renewing():
			renew = append(renew, le)
		case !now.Before(le.Deadline()):
			le.expire()
		}
	}
	if len(renew) == 0 {
		return false
	}
	// One batch per strategy (a Locker that fell back to pipelines may
	// still hold leases it took with scripts).
	byEngine := map[engine][]*Lease{}
	for _, le := range renew {
		byEngine[le.eng] = append(byEngine[le.eng], le)
	}
	for eng, leases := range byEngine {
		// Bounded by the period: a renewal that takes longer than that
		// is better abandoned and retried.
		if len(w.renewBatch(eng, leases, time.Now().Add(w.every()))) > 0 {
			failed = true
		}
	}
	return failed
}

// renewBatch extends leases of one engine in one round trip per node, sent
// by until at the latest. It returns the leases whose renewal failed for a
// reason other than a lost key (those whose deadline has passed end, as
// lost).
func (w *watchdog) renewBatch(eng engine, renew []*Lease, until time.Time) (failed []*Lease) {
	jobs := make([]protocol.ExtendJob, len(renew))
	now := time.Now()
	for i, le := range renew {
		jobs[i] = protocol.ExtendJob{Set: le.set, Who: le.who, TTL: renewTTL(le.req.TTL, le.Deadline(), now),
			MinReplicas: w.l.opt.MinReplicas, ReplicaTimeout: w.l.opt.ReplicaTimeout}
	}
	ctx, cancel := context.WithDeadline(context.Background(), until)
	defer cancel()
	t0 := time.Now()
	res := eng.ExtendMany(ctx, jobs)
	var ev RenewEvent
	if w.l.obs != nil {
		ev = RenewEvent{Leases: len(renew), Latency: time.Since(t0)}
	}
	for i, le := range renew {
		r := res[i]
		ev.Keys += le.set.Len()
		switch {
		case len(r.Lost) > 0:
			ev.Lost++
			le.lose(r.Lost)
		case r.Err == nil:
			ev.Renewed++
			le.renewed(t0.Add(jobs[i].TTL))
		default:
			ev.Failed++
			if ev.Err == nil && w.l.obs != nil {
				ev.Err = public(r.Err)
			}
			failed = append(failed, le)
			if !time.Now().Before(le.Deadline()) {
				le.expire()
			}
		}
	}
	if w.l.obs != nil {
		w.l.obs.Renewed(ev)
	}
	return failed
}

// renewTTL is the expiry a renewal at now gives a lease whose deadline is
// deadline: the Locker's TTL, or more if Lease.Extend pushed the deadline
// further. A renewal never brings a key's expiry before the deadline the
// lease reports (TestRenewalKeepsAnExtension).
func renewTTL(ttl time.Duration, deadline, now time.Time) time.Duration {
	// Rounded up to Redis's millisecond: never a hair short.
	if left := (deadline.Sub(now) + time.Millisecond - 1).Truncate(time.Millisecond); left > ttl {
		return left
	}
	return ttl
}

// convertLoop sends the conversions of leases granted in reserved form
// (see watchdog): every lease whose conversion is due, in one batch per
// engine, like a tick. It runs from the first such lease to close.
func (w *watchdog) convertLoop() {
	defer close(w.convLoopDone)
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		due, next := w.dueConversions(time.Now())
		if len(due) > 0 {
			w.convertBatch(due)
			continue
		}
		t.Reset(next)
		select {
		case <-w.stop:
			return
		case <-w.convKick:
		case <-t.C:
		}
	}
}

// dueConversions takes the leases whose conversion is due at now out of
// the pending set, and returns them and how long until the next one.
func (w *watchdog) dueConversions(now time.Time) (due []*Lease, next time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	next = time.Hour
	for le, at := range w.convert {
		if wait := at.Sub(now); wait > 0 {
			next = min(next, wait)
			continue
		}
		delete(w.convert, le)
		due = append(due, le)
	}
	return due, next
}

// convertBatch sends the conversions of due leases. A lease that is still
// in reserved form after it (its call failed: a lost reply, a moved slot)
// is due again convertRetry later; its deadline bounds the retries, as the
// deadline of any renewal does: past it the lease ends, as lost (here, or
// at once by the loss tracker).
func (w *watchdog) convertBatch(due []*Lease) {
	now := time.Now()
	byEngine := map[engine][]*Lease{}
	until := now
	for _, le := range due {
		switch {
		case !le.converting():
			// Converted by Extend, ended, or its Release gave up: an
			// abandoned lease's keys must expire on their own.
		case !now.Before(le.Deadline()):
			le.expire()
		default:
			byEngine[le.eng] = append(byEngine[le.eng], le)
			until = maxTime(until, le.Deadline())
		}
	}
	for eng, leases := range byEngine {
		// Bounded by the latest deadline: after it, a conversion is of
		// no use to the lease (it has ended).
		for _, le := range w.renewBatch(eng, leases, until) {
			w.retryConversion(le)
		}
	}
}

// retryConversion makes le's conversion due again, unless it has ended
// (or the watchdog stopped) meanwhile.
func (w *watchdog) retryConversion(le *Lease) {
	if !le.converting() {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, ok := w.leases[le]; ok && !w.stopped {
		w.convert[le] = time.Now().Add(convertRetry)
	}
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
