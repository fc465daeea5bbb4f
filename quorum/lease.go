package quorum

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/slotlock/slotlock"
)

// Lease is a set of keys held on a majority of the deployments. Its life is
// visible like a slotlock.Lease's: Done closes when it ends (released, or
// lost), and Context gives work a context cancelled at that moment.
type Lease struct {
	l    *Locker
	keys []string
	// subs[i] is deployment i's lease, nil where it did not grant.
	subs []*slotlock.Lease

	life   context.Context // cancelled, with the cause, when the lease ends
	end    context.CancelCauseFunc
	rearm  chan struct{} // Extend moved a deadline: the monitor looks again
	mu     sync.Mutex
	ending bool // Release has begun: ends of deployment leases are ours
	over   bool // ended: Deadline returns final from then on
	final  time.Time
	last   time.Time // the latest window seen while a majority held
}

// start begins the lease's life: one goroutine watches the deployments'
// leases and the validity window until the lease ends.
func (le *Lease) start() {
	le.last = le.window()
	le.keys = le.subs[slices.IndexFunc(le.subs, func(s *slotlock.Lease) bool { return s != nil })].Keys()
	le.life, le.end = context.WithCancelCause(context.Background())
	le.rearm = make(chan struct{}, 1)
	go le.monitor()
}

// Keys returns the lease's keys in canonical order, duplicates removed.
func (le *Lease) Keys() []string { return slices.Clone(le.keys) }

// Held returns the indexes of the deployments whose leases are still alive.
func (le *Lease) Held() []int {
	var out []int
	for i, s := range le.subs {
		if s != nil && s.Err() == nil {
			out = append(out, i)
		}
	}
	return out
}

// Deadline returns the end of the validity window: the latest time at
// which a majority of the deployments still hold the keys by this client's
// clock, minus Options.ClockDrift. Each deployment's own deadline is the
// send time of its last granting or renewing request plus the TTL
// (slotlock.Lease.Deadline), so at the grant the window is the TTL minus
// the time the attempt took minus the drift allowance. Renewals move it.
// After the lease ended it returns the window the lease last had.
func (le *Lease) Deadline() time.Time {
	le.mu.Lock()
	if le.over {
		defer le.mu.Unlock()
		return le.final
	}
	le.mu.Unlock()
	return le.window()
}

// window computes the validity window from the deployments' leases: the
// zero time when fewer than a majority are alive.
func (le *Lease) window() time.Time {
	var ds []time.Time
	for _, s := range le.subs {
		if s != nil && s.Err() == nil {
			ds = append(ds, s.Deadline())
		}
	}
	if len(ds) < le.l.need {
		return time.Time{}
	}
	slices.SortFunc(ds, func(a, b time.Time) int { return b.Compare(a) })
	return ds[le.l.need-1].Add(-le.l.opt.ClockDrift)
}

// FencingToken returns the fencing token deployment i gave key, with
// Options.Fencing. Tokens of different deployments are separate counters
// and are NOT comparable with each other: see docs/safety.md ("Quorum
// mode") for how a store can use the set of them.
func (le *Lease) FencingToken(i int, key string) (int64, bool) {
	if i < 0 || i >= len(le.subs) || le.subs[i] == nil {
		return 0, false
	}
	return le.subs[i].FencingToken(key)
}

// Done returns a channel closed when the lease ends.
func (le *Lease) Done() <-chan struct{} { return le.life.Done() }

// Err returns nil while the lease is alive, slotlock.ErrReleased after
// Release, or a *LostError (errors.Is slotlock.ErrLeaseLost) once a
// majority no longer holds the keys.
func (le *Lease) Err() error {
	if le.life.Err() == nil {
		return nil
	}
	return context.Cause(le.life)
}

// Context returns a context derived from parent that is cancelled when the
// lease ends, with Err's value as its cause. Call cancel when done.
func (le *Lease) Context(parent context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(parent)
	stop := context.AfterFunc(le.life, func() { cancel(context.Cause(le.life)) })
	return ctx, func() {
		stop()
		cancel(context.Canceled)
	}
}

// monitor ends the lease as lost when fewer than a majority of the
// deployments' leases are alive, or when the validity window passes: a
// majority of renewals did not come back in time.
func (le *Lease) monitor() {
	ended := make(chan int, len(le.subs))
	for i, s := range le.subs {
		if s == nil {
			continue
		}
		go func() {
			select {
			case <-s.Done():
				ended <- i
			case <-le.life.Done():
			}
		}()
	}
	timer := time.NewTimer(time.Until(le.Deadline()))
	defer timer.Stop()
	for {
		select {
		case <-le.life.Done():
			return
		case <-ended:
			if le.releasing() {
				continue
			}
			if held := len(le.Held()); held < le.l.need {
				le.finish(le.lostError(false))
				return
			}
		case <-le.rearm:
		case <-timer.C:
		}
		d := le.window()
		if !d.After(time.Now()) {
			if !le.releasing() {
				le.finish(le.lostError(true))
				return
			}
			d = time.Now().Add(time.Hour) // Release ends the lease
		}
		le.mu.Lock()
		le.last = d
		le.mu.Unlock()
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		timer.Reset(time.Until(d))
	}
}

// finish ends the lease with cause, once, fixing what Deadline returns from
// then on: the window it had, or the last one a majority gave it.
func (le *Lease) finish(cause error) {
	d := le.window()
	le.mu.Lock()
	if !le.over {
		le.over = true
		le.final = le.last
		if !d.IsZero() {
			le.final = d
		}
	}
	le.mu.Unlock()
	le.end(cause)
}

func (le *Lease) releasing() bool {
	le.mu.Lock()
	defer le.mu.Unlock()
	return le.ending
}

func (le *Lease) lostError(expired bool) *LostError {
	e := &LostError{Need: le.l.need, Expired: expired}
	for i, s := range le.subs {
		if s == nil {
			continue
		}
		if err := s.Err(); err != nil {
			e.Lost = append(e.Lost, le.l.failed(i, err))
		} else {
			e.Held++
		}
	}
	if expired && e.Held >= e.Need {
		// Alive on a majority by their own counts, but not renewed on a
		// majority within the window (Deadline): the lease cannot count
		// on them.
		e.Held = 0
		for _, s := range le.subs {
			if s != nil && s.Err() == nil && s.Deadline().Add(-le.l.opt.ClockDrift).After(time.Now()) {
				e.Held++
			}
		}
	}
	return e
}

// Release gives the keys back on every deployment that granted them,
// owner-checked, all at once. It is idempotent. It returns nil when a
// majority released keys they still held (the rest expire by their TTL);
// otherwise the lease's loss if it was lost, or a *QuorumError naming the
// deployments that could not release.
func (le *Lease) Release(ctx context.Context) error {
	le.mu.Lock()
	if le.ending {
		le.mu.Unlock()
		return nil
	}
	le.ending = true
	le.mu.Unlock()
	if d := le.window(); !d.IsZero() {
		le.mu.Lock()
		le.last = d
		le.mu.Unlock()
	}
	lost := le.Err()
	qe := le.tally("release", le.each(func(s *slotlock.Lease) error { return s.Release(ctx) }))
	le.finish(slotlock.ErrReleased) // no-op after a loss: Err keeps reporting it
	switch {
	case lost != nil:
		return lost
	case qe.Done >= le.l.need:
		return nil
	}
	return qe
}

// releaseAll gives back the leases of a failed attempt.
func (le *Lease) releaseAll(ctx context.Context) {
	le.each(func(s *slotlock.Lease) error { return le.l.release(ctx, s) })
}

// Extend sets the expiry of the keys to ttl from now on every deployment
// that still holds them, all at once. It succeeds when a majority extended
// (the validity window then runs from this call); otherwise it returns a
// *QuorumError, and if fewer than a majority still hold the keys the lease
// ends as lost.
func (le *Lease) Extend(ctx context.Context, ttl time.Duration) error {
	if err := le.Err(); err != nil {
		return fmt.Errorf("%w: %w", slotlock.ErrNotHeld, err)
	}
	qe := le.tally("extend", le.each(func(s *slotlock.Lease) error {
		if s.Err() != nil {
			return s.Err()
		}
		return s.Extend(ctx, ttl)
	}))
	select {
	case le.rearm <- struct{}{}:
	default:
	}
	if qe.Done >= le.l.need {
		return nil
	}
	if errors.Is(qe, slotlock.ErrInvalid) {
		return qe.Failed[0].Err
	}
	return qe
}

// tally counts, per deployment that granted, an operation's errors from
// each: a QuorumError that is a success when Done reaches the majority.
func (le *Lease) tally(op string, errs []error) *QuorumError {
	qe := &QuorumError{Op: op, Need: le.l.need}
	for i, err := range errs {
		switch {
		case le.subs[i] == nil:
		case err == nil:
			qe.Done++
		default:
			qe.Failed = append(qe.Failed, le.l.failed(i, err))
		}
	}
	return qe
}

// each runs fn on every deployment's lease at once and returns the errors
// by deployment (nil where it granted nothing).
func (le *Lease) each(fn func(*slotlock.Lease) error) []error {
	errs := make([]error, len(le.subs))
	var wg sync.WaitGroup
	for i, s := range le.subs {
		if s == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = fn(s)
		}()
	}
	wg.Wait()
	return errs
}
