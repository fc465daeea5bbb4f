package slotlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/slotlock/slotlock/internal/protocol"
	"github.com/slotlock/slotlock/slot"
)

// Observer sees what a Locker does, for metrics and traces: package
// slotlockotel (a module of its own) implements it with OpenTelemetry.
// Set it in Options.Observer; nil, the default, costs nothing (no clock
// read, no allocation: BenchmarkOneKey/observer=none).
//
// The Locker calls its methods synchronously, on the goroutine that did
// the work (the caller's, or one of the Locker's own: the watchdog's for
// renewals, the watchdog's or the loss tracker's for losses), so they may
// run concurrently: they must be safe for that, return quickly and not
// call the Locker. An event's
// slices belong to the Locker: read them during the call, keep no
// reference.
type Observer interface {
	// Acquired follows every Lock and TryLock, whatever its outcome.
	Acquired(AcquireEvent)
	// Released follows every Release that sent something (a second
	// Release of a released lease sends nothing and is not reported).
	Released(ReleaseEvent)
	// Renewed follows every renewal round of the watchdog.
	Renewed(RenewEvent)
	// Ended follows the end of every lease, once: released, or lost.
	Ended(EndEvent)
}

// Outcome says how an operation ended.
type Outcome string

// The outcomes of AcquireEvent and ReleaseEvent.
const (
	OutcomeAcquired Outcome = "acquired" // every key taken
	OutcomeConflict Outcome = "conflict" // TryLock: keys held by others (ErrNotAcquired)
	OutcomeTimeout  Outcome = "timeout"  // the context's deadline passed
	OutcomeCanceled Outcome = "canceled" // the context was cancelled
	OutcomeInvalid  Outcome = "invalid"  // refused before anything was sent (ErrInvalid, ErrClosed, ErrUnsupported)
	OutcomeReleased Outcome = "released" // every key deleted
	OutcomeLost     Outcome = "lost"     // some keys were no longer held (ErrNotHeld)
	OutcomeError    Outcome = "error"    // anything else (Redis errors, lost replies, replicas short)
)

// outcomeOf classifies the error of an operation.
func outcomeOf(err error, ok Outcome) Outcome {
	switch {
	case err == nil:
		return ok
	case errors.Is(err, ErrNotAcquired):
		return OutcomeConflict
	case errors.Is(err, ErrNotHeld):
		return OutcomeLost
	case errors.Is(err, context.DeadlineExceeded):
		return OutcomeTimeout
	case errors.Is(err, context.Canceled):
		return OutcomeCanceled
	case errors.Is(err, ErrInvalid), errors.Is(err, ErrClosed), errors.Is(err, ErrUnsupported):
		return OutcomeInvalid
	}
	return OutcomeError
}

// AcquireEvent is one Lock or TryLock.
type AcquireEvent struct {
	// Ctx is the caller's context: an observer that opens spans takes
	// its parent from it.
	Ctx context.Context
	// Wait is true for Lock, false for TryLock.
	Wait bool
	// Keys are the keys as the caller passed them, copied (an observer
	// should not label metrics with them: unbounded cardinality).
	Keys []string
	// KeyCount is the number of distinct keys, Nodes the number of
	// masters they live on (0 when the slot map is not known yet).
	KeyCount, Nodes int
	Start           time.Time
	Latency         time.Duration
	// Waited is the time spent waiting for keys held by others (in the
	// Locker's in-process line and in Redis) and in retry pauses.
	Waited time.Duration
	// Attempts is the number of attempts sent to Redis; Conflicts the
	// keys they found held by others, summed over attempts (and, for a
	// Lock that waited by reservation at once, its first round's).
	Attempts, Conflicts int
	// Rollbacks counts the owner-checked releases of keys the
	// acquisition had taken: the keys Lock gives back above the one it
	// waits for, and the rollback of a failed acquisition.
	Rollbacks int
	// RollbackErr is the error of a rollback that could not settle every
	// key (a node it could not reach): those keys stay until their TTL.
	RollbackErr error
	Strategy    Strategy
	Outcome     Outcome
	Err         error  // nil when acquired
	Lease       *Lease // nil unless acquired
}

// ReleaseEvent is one Release that sent something.
type ReleaseEvent struct {
	Ctx             context.Context
	Lease           *Lease
	KeyCount, Nodes int
	Start           time.Time
	Latency         time.Duration
	// Held is how long the lease held its keys, from its grant.
	Held    time.Duration
	Outcome Outcome // released, lost (some keys were gone), or error
	Err     error
}

// RenewEvent is one renewal round of the watchdog: every renewing lease
// of one strategy, in one round trip per node.
type RenewEvent struct {
	Leases  int // leases sent
	Keys    int // their keys
	Renewed int // leases renewed
	Lost    int // leases found to have lost keys (each also ends: EndEvent)
	Failed  int // leases whose renewal failed otherwise (retried soon)
	Latency time.Duration
	Err     error // the first failure, if any
}

// EndEvent is the end of a lease.
type EndEvent struct {
	Lease    *Lease
	KeyCount int
	// Held is how long the lease held its keys, from its grant.
	Held time.Duration
	// Lost is true when the lease ended by a loss; Cause is then a
	// *LostError naming the keys found lost (LostKeys), else
	// ErrReleased.
	Lost     bool
	LostKeys []string
	Cause    error
}

// observedAcquire is acquire with an observer: it counts what the
// acquisition does (Request.Stats) and reports it.
func (l *Locker) observedAcquire(ctx context.Context, keys []string, entries []protocol.Entry, o acquireOptions) (*Lease, error) {
	start := time.Now()
	le, err := l.take(ctx, keys, entries, o, true)
	// A copy: handing the caller's slice to an interface method would
	// make it escape, and cost every Lock without an observer the
	// allocation of its variadic argument (BenchmarkOneKey saw it). A
	// request's keys are its entries' names (keys and permit resources).
	names := slices.Clone(keys)
	for _, e := range entries {
		names = append(names, e.Name)
	}
	ev := AcquireEvent{Ctx: ctx, Wait: o.wait > 0, Keys: names, Start: start, Latency: time.Since(start),
		Outcome: outcomeOf(err, OutcomeAcquired), Err: err}
	if le != nil { // nil when refused before a lease was made
		ev.KeyCount, ev.Nodes = le.set.Len(), l.nodesOf(le.set)
		ev.Waited, ev.Attempts, ev.Conflicts, ev.Rollbacks = le.stats.Waited, le.stats.Attempts, le.stats.Conflicts, le.stats.Rollbacks
		ev.Strategy = le.strategy
		ev.RollbackErr = public(le.stats.RollbackErr)
	}
	if err != nil {
		l.obs.Acquired(ev)
		return nil, err
	}
	ev.Lease = le
	l.obs.Acquired(ev)
	return le, nil
}

// nodesOf counts the masters set's keys live on, by the slot map as last
// read (0 before the first read).
func (l *Locker) nodesOf(set *protocol.Set) int {
	m := l.topo.Loaded()
	if m == nil {
		return 0
	}
	// A bit per master on the stack for clusters of up to 64 masters: the
	// observer is called per acquisition and should not allocate for this.
	var small [1]uint64
	seen := small[:]
	if len(m.Addrs) > 64 {
		seen = make([]uint64, (len(m.Addrs)+63)/64)
	}
	n := 0
	slot.SlotRuns(set.Keys, func(s uint16, _ []slot.Key) bool {
		if o := m.Owner(s); o >= 0 && seen[o/64]&(1<<(o%64)) == 0 {
			seen[o/64] |= 1 << (o % 64)
			n++
		}
		return true
	})
	return n
}

// heldFor is how long le has held its keys at now: from its grant
// (protocol.Grant.At: the send of the granting attempt, or when a direct
// grant was decided).
func (le *Lease) heldFor(now time.Time) time.Duration {
	if le.grantedAt.IsZero() {
		return 0
	}
	return now.Sub(le.grantedAt)
}

// report reports the end of le (by cause) to the observer and, for a loss,
// to the log.
func (le *Lease) report(cause error) {
	now := time.Now()
	lost, isLost := cause.(*LostError) // lostError's, or ErrReleased (errors.As would allocate)
	if le.l.log != nil && isLost {
		le.l.log.Warn("slotlock: lease lost", "lease", le.ID(), "prefix", le.l.names.Prefix(),
			"keys", le.set.Len(), "lost", lostKeysAttr(lost.Keys), "held", le.heldFor(now).Round(time.Millisecond))
	}
	if le.l.obs != nil {
		ev := EndEvent{Lease: le, KeyCount: le.set.Len(), Held: le.heldFor(now), Lost: isLost, Cause: cause}
		if isLost {
			ev.LostKeys = lost.Keys
		}
		le.l.obs.Ended(ev)
	}
}

// lostKeysAttr bounds the keys a log line names: the first 8, then how
// many more (LostError.Error does the same).
func lostKeysAttr(keys []string) []string {
	if len(keys) <= 8 {
		return keys
	}
	return append(keys[:8:8], fmt.Sprintf("and %d more", len(keys)-8))
}
