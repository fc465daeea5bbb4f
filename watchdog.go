package slotlock

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/slotlock/slotlock/internal/protocol"
)

// watchdog is the one renewal loop of a Locker. Every period it extends all
// the leases that renew, in one pipelined round trip per node (their
// per-node extend scripts side by side), and notices the leases that were
// lost: a key found not held, or a deadline passed without a successful
// renewal. Leases that do not renew are only watched for their deadline.
// It starts with the first lease and stops with Locker.Close.
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
}

func newWatchdog(l *Locker) *watchdog {
	w := &watchdog{
		l:      l,
		leases: make(map[*Lease]struct{}),
		stop:   make(chan struct{}),
		done:   make(chan struct{}),
		shrunk: make(chan struct{}, 1),
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
}

// remove forgets le: an ended lease (released, lost) sends nothing more.
func (w *watchdog) remove(le *Lease) {
	w.mu.Lock()
	delete(w.leases, le)
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
	started := w.started
	close(w.stop)
	w.mu.Unlock()
	if started {
		<-w.done
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
