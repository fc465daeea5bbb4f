package quorum

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/redis/rueidis"

	"github.com/slotlock/slotlock"
	"github.com/slotlock/slotlock/internal/protocol"
)

// Locker hands out leases on sets of keys held on a majority of several
// independent deployments. It is safe for concurrent use.
type Locker struct {
	opt    Options
	need   int
	dep    []*slotlock.Locker
	names  []string
	wg     sync.WaitGroup // attempts still talking to slow deployments
	mu     sync.Mutex
	closed bool

	// beforeCount, set only by tests, runs after an attempt's answers are
	// in and before they are counted: a test can make the validity window
	// pass there.
	beforeCount func()
	// afterTry, set only by tests, runs in deployment i's goroutine after
	// its TryLock returned and before its answer is counted: a test can
	// hold one deployment's grant until the attempt is decided.
	afterTry func(i int)
}

// New returns a Locker over one deployment per client: each a cluster or a
// single server, independent of the others (a client given twice, or two
// clients of one deployment, would count one deployment's vote twice; the
// first is refused, the second cannot be seen). Use an odd number: four
// deployments survive the loss of one, like three.
func New(clients []rueidis.Client, opt Options) (*Locker, error) {
	if len(clients) == 0 {
		return nil, fmt.Errorf("%w: no deployments", slotlock.ErrInvalid)
	}
	opt, err := opt.withDefaults()
	if err != nil {
		return nil, err
	}
	l := &Locker{opt: opt, need: len(clients)/2 + 1}
	for i, c := range clients {
		if c == nil {
			return nil, fmt.Errorf("%w: client %d is nil", slotlock.ErrInvalid, i)
		}
		if j := slices.Index(clients[:i], c); j >= 0 {
			return nil, fmt.Errorf("%w: clients %d and %d are the same client: one deployment would vote twice", slotlock.ErrInvalid, j, i)
		}
	}
	for i, c := range clients {
		dl, err := slotlock.New(c, opt.Options)
		if err != nil {
			l.closeDeployments()
			return nil, fmt.Errorf("slotlock/quorum: deployment %d: %w", i, err)
		}
		l.dep = append(l.dep, dl)
		l.names = append(l.names, nameOf(c))
	}
	return l, nil
}

// nameOf names a deployment by the smallest address its client knows.
func nameOf(c rueidis.Client) string {
	var addrs []string
	for a := range c.Nodes() {
		addrs = append(addrs, a)
	}
	if len(addrs) == 0 {
		return "?"
	}
	slices.Sort(addrs)
	if len(addrs) > 1 {
		return fmt.Sprintf("%s and %d more", addrs[0], len(addrs)-1)
	}
	return addrs[0]
}

// Deployments returns how many deployments the Locker spans, and Majority
// how many of them a lease needs.
func (l *Locker) Deployments() int { return len(l.dep) }

// Majority returns how many deployments must hold a lease's keys.
func (l *Locker) Majority() int { return l.need }

// Close stops every deployment's Locker (their watchdogs stop renewing) and
// waits for attempts that were still waiting on slow deployments to give
// back what they took, at most AttemptTimeout plus CleanupTimeout. Leases
// are not released: they end at their deadline unless released. The
// clients stay open.
func (l *Locker) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	l.mu.Unlock()
	l.wg.Wait()
	l.closeDeployments()
	return nil
}

func (l *Locker) closeDeployments() {
	for _, d := range l.dep {
		_ = d.Close()
	}
}

// Lock takes every key on a majority of the deployments, retrying whole
// attempts (after a random pause) until one succeeds or ctx ends. No
// attempt waits on one deployment while holding keys on another: waiting
// there could deadlock two callers that each won a different deployment.
// On failure nothing is held anywhere (keys on a deployment that cannot be
// reached expire by their TTL).
func (l *Locker) Lock(ctx context.Context, keys ...string) (*Lease, error) {
	var last error // the last attempt that ended for a reason of its own
	for round := 0; ; round++ {
		le, err := l.attempt(ctx, keys)
		if err == nil || l.hopeless(err) {
			return le, err
		}
		if ctx.Err() != nil {
			// An attempt that ctx cut short says only that: the one
			// before it says why the deployments refused.
			if last != nil && !errors.Is(err, ErrNoQuorum) {
				err = last
			}
			return nil, fmt.Errorf("slotlock/quorum: lock: %w (last attempt: %w)", context.Cause(ctx), err)
		}
		last = err
		if serr := protocol.SleepCtx(ctx, retryPause(round)); serr != nil {
			return nil, fmt.Errorf("slotlock/quorum: lock: %w (last attempt: %w)", serr, err)
		}
	}
}

// TryLock makes one attempt. If fewer than a majority granted the whole
// batch in time, it returns a *QuorumError (errors.Is ErrNoQuorum) naming
// every deployment that refused and why, and holds nothing.
func (l *Locker) TryLock(ctx context.Context, keys ...string) (*Lease, error) {
	return l.attempt(ctx, keys)
}

// retryPause is the pause before the next attempt of Lock: random, so that
// two callers that split the deployments between them do not meet again
// in lockstep, and growing from 5 ms to 200 ms.
func retryPause(round int) time.Duration {
	return protocol.Jittered(round, 5*time.Millisecond, 200*time.Millisecond)
}

// hopeless reports an attempt's error that every later attempt would
// repeat: bad input everywhere, or deployments that refuse for good (a
// closed Locker, a feature the strategy lacks) so many that no majority
// is left.
func (l *Locker) hopeless(err error) bool {
	var qe *QuorumError
	if !errors.As(err, &qe) {
		return permanent(err)
	}
	refused := 0
	for _, f := range qe.Failed {
		if permanent(f.Err) {
			refused++
		}
	}
	return len(l.dep)-refused < l.need
}

// permanent reports errors that another attempt would repeat: bad input,
// a closed Locker, a feature the strategy lacks.
func permanent(err error) bool {
	return errors.Is(err, slotlock.ErrInvalid) || errors.Is(err, slotlock.ErrClosed) || errors.Is(err, slotlock.ErrUnsupported)
}

// outcome is what one deployment answered to one attempt.
type outcome struct {
	lease *slotlock.Lease
	err   error
	in    bool // answered before the attempt was decided
}

// attempt asks every deployment at once for the whole batch, and decides
// when all have answered or AttemptTimeout has passed. A deployment that
// answers after the decision is given back what it granted by its own
// goroutine, which the Locker waits for on Close.
func (l *Locker) attempt(ctx context.Context, keys []string) (*Lease, error) {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil, fmt.Errorf("slotlock/quorum: lock: %w", slotlock.ErrClosed)
	}
	l.wg.Add(len(l.dep))
	l.mu.Unlock()
	if err := ctx.Err(); err != nil {
		l.wg.Add(-len(l.dep))
		return nil, fmt.Errorf("slotlock/quorum: lock: %w", context.Cause(ctx))
	}
	actx, cancel := context.WithTimeout(ctx, l.opt.AttemptTimeout)
	defer cancel()
	var (
		mu      sync.Mutex
		decided bool
		outs    = make([]outcome, len(l.dep))
		left    = len(l.dep)
		all     = make(chan struct{})
	)
	for i, d := range l.dep {
		go func() {
			defer l.wg.Done()
			le, err := d.TryLock(actx, keys...)
			if l.afterTry != nil {
				l.afterTry(i)
			}
			mu.Lock()
			if decided {
				mu.Unlock()
				if le != nil {
					l.giveBack(le) // too late: the attempt was decided without it
				}
				return
			}
			outs[i] = outcome{lease: le, err: err, in: true}
			left--
			if left == 0 {
				close(all)
			}
			mu.Unlock()
		}()
	}
	select {
	case <-all:
	case <-actx.Done():
	}
	mu.Lock()
	decided = true
	got := slices.Clone(outs)
	mu.Unlock()
	if l.beforeCount != nil {
		l.beforeCount()
	}

	le := &Lease{l: l, subs: make([]*slotlock.Lease, len(l.dep))}
	qe := &QuorumError{Op: "lock", Need: l.need}
	for i, o := range got {
		switch {
		case o.lease != nil:
			le.subs[i] = o.lease
			qe.Done++
		case o.in:
			qe.Failed = append(qe.Failed, l.failed(i, o.err))
		default:
			qe.Failed = append(qe.Failed, l.failed(i, fmt.Errorf("no answer within AttemptTimeout %v: %w", l.opt.AttemptTimeout, context.Cause(actx))))
		}
	}
	if qe.Done >= l.need && ctx.Err() == nil {
		if le.Deadline().After(time.Now()) {
			le.start()
			return le, nil
		}
		qe.Expired = true
	}
	le.releaseAll(ctx)
	if ctx.Err() != nil {
		return nil, fmt.Errorf("slotlock/quorum: lock: %w (%w)", context.Cause(ctx), qe)
	}
	if len(qe.Failed) > 0 && allPermanent(qe.Failed) {
		return nil, qe.Failed[0].Err // the same bad input everywhere: say it once
	}
	return nil, qe
}

func allPermanent(fs []*DeploymentError) bool {
	for _, f := range fs {
		if !permanent(f.Err) {
			return false
		}
	}
	return true
}

func (l *Locker) failed(i int, err error) *DeploymentError {
	return &DeploymentError{Deployment: i, Name: l.names[i], Err: err}
}

// giveBack releases a deployment's lease that no quorum lease owns, on a
// context of its own: the caller has its answer already.
func (l *Locker) giveBack(le *slotlock.Lease) {
	l.release(context.Background(), le)
}

// release gives one deployment's lease back within the cleanup timeout,
// whatever happened to ctx: what it cannot delete expires by its TTL.
func (l *Locker) release(ctx context.Context, le *slotlock.Lease) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.cleanupTimeout())
	defer cancel()
	return le.Release(ctx)
}

func (l *Locker) cleanupTimeout() time.Duration {
	if l.opt.CleanupTimeout > 0 {
		return l.opt.CleanupTimeout
	}
	return slotlock.DefaultCleanupTimeout
}
