package batch

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/slotlock/slotlock/internal/topology"
	"github.com/slotlock/slotlock/slot"
)

var (
	// ErrNotAcquired reports keys held by someone else; the error is a
	// *ConflictError naming them.
	ErrNotAcquired = errors.New("slotlock: not acquired")
	// ErrReplicas reports that fewer replicas than asked acknowledged the
	// lock writes in time; the error is a *ReplicaError naming the nodes.
	ErrReplicas = errors.New("slotlock: too few replica acknowledgements")
)

// ReplicaError names the masters whose replicas did not acknowledge the
// lock writes within the timeout.
type ReplicaError struct {
	Want       int
	Shortfalls []ReplicaShortfall
}

func (e *ReplicaError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "slotlock: wanted %d replica acknowledgement(s):", e.Want)
	for _, s := range e.Shortfalls {
		fmt.Fprintf(&b, " node %s got %d", s.Node, s.Acked)
	}
	return b.String()
}

// Is makes errors.Is(err, ErrReplicas) true.
func (e *ReplicaError) Is(target error) bool { return target == ErrReplicas }

// Grant is a successful acquisition.
type Grant struct {
	// Deadline is the client-side estimate of the keys' expiry: the
	// moment the granting attempt was sent plus the TTL.
	Deadline time.Time
	// Fences are the fencing tokens per set index, with fencing on.
	Fences []int64
	// Warning is a *ReplicaError when replicas fell short and the caller
	// asked to be warned rather than refused.
	Warning error
}

// Request is what an acquisition needs besides the keys.
type Request struct {
	Who     Who
	TTL     time.Duration
	Fencing bool
	// MinReplicas > 0 waits for that many replica acknowledgements per
	// node (WAIT on the scripts' connection) for up to ReplicaTimeout.
	MinReplicas    int
	ReplicaTimeout time.Duration
	// WarnOnReplicas keeps the keys when replicas fall short and reports
	// it in Grant.Warning; otherwise the acquisition is rolled back and
	// fails with a *ReplicaError.
	WarnOnReplicas bool
	Cleanup        Cleanup
}

func (r Request) options(mode Mode) AcquireOptions {
	return AcquireOptions{Mode: mode, Fencing: r.Fencing, MinReplicas: r.MinReplicas, ReplicaTimeout: r.ReplicaTimeout}
}

// granted turns a fully held attempt into a Grant, or into an error after
// rolling back when replicas fell short.
func (e *Engine) granted(ctx context.Context, set *Set, r Request, a *Attempt, t0 time.Time) (Grant, error) {
	g := Grant{Deadline: t0.Add(r.TTL), Fences: a.Fences}
	if len(a.Replicas) == 0 {
		return g, nil
	}
	rerr := &ReplicaError{Want: r.MinReplicas, Shortfalls: a.Replicas}
	if r.WarnOnReplicas {
		g.Warning = rerr
		return g, nil
	}
	return Grant{}, errors.Join(rerr, r.Cleanup.rollback(ctx, e, set, r.Who))
}

// KeyConflict is one key held by another lease.
type KeyConflict struct {
	Key string
	// TTL is how long the other holder's lock has left, -1 if it has no
	// expiry (set by hand: slotlock never writes a lock without one) or,
	// for Local conflicts, if the holder is still acquiring.
	TTL time.Duration
	// Local is true when the holder is another lease of the same Locker,
	// found in the in-process queue without asking Redis.
	Local bool
}

// ConflictError lists the keys that stopped an acquisition.
type ConflictError struct {
	Conflicts []KeyConflict
}

func (e *ConflictError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "slotlock: not acquired: %d key(s) held by others:", len(e.Conflicts))
	for i, c := range e.Conflicts {
		if i == 8 {
			fmt.Fprintf(&b, " and %d more", len(e.Conflicts)-i)
			break
		}
		switch {
		case c.Local && c.TTL < 0:
			fmt.Fprintf(&b, " %q (held in this process, acquiring)", c.Key)
		case c.Local:
			fmt.Fprintf(&b, " %q (held in this process, for %v)", c.Key, c.TTL)
		case c.TTL < 0:
			fmt.Fprintf(&b, " %q (no expiry)", c.Key)
		default:
			fmt.Fprintf(&b, " %q (for %v)", c.Key, c.TTL)
		}
	}
	return b.String()
}

// Is makes errors.Is(err, ErrNotAcquired) true.
func (e *ConflictError) Is(target error) bool { return target == ErrNotAcquired }

// Cleanup bounds the rollback that runs after a failed acquisition. It runs
// on a context detached from the caller's (a cancelled caller must still not
// leave keys locked) but bounded by Timeout.
type Cleanup struct {
	Timeout time.Duration
}

func (c Cleanup) rollback(ctx context.Context, e *Engine, set *Set, who Who) error {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.Timeout)
	defer cancel()
	_, err := e.Release(rctx, set, nil, who)
	if err != nil {
		return fmt.Errorf("rollback (keys expire by their TTL): %w", err)
	}
	return nil
}

// maxTopologyRetries bounds TryLock's silent retries when a slot moved
// under it: that is not a conflict, so it should not surface as one.
const maxTopologyRetries = 5

// TryLock makes one attempt to take every key of set, all or nothing: on any
// failure it releases, owner-checked, whatever the attempt took. A moved
// slot is retried (with the refreshed slot map), a conflict is not.
func (e *Engine) TryLock(ctx context.Context, set *Set, r Request) (Grant, error) {
	c := r.Cleanup
	for round := 0; ; round++ {
		t0 := time.Now()
		opt := r.options(AllOrNothing)
		opt.First = round == 0 // later rounds follow a moved slot or a lost reply
		a := e.Acquire(ctx, set, 0, r.Who, r.TTL, opt)
		if a.FirstFailure(0) == set.Len() {
			return e.granted(ctx, set, r, &a, t0)
		}
		var rbErr error
		if anyWritten(a.State) {
			rbErr = c.rollback(ctx, e, set, r.Who)
		}
		if len(a.Conflicts) > 0 {
			return Grant{}, errors.Join(e.conflictError(set, a.Conflicts), a.Err, rbErr)
		}
		if err := ctx.Err(); err != nil {
			return Grant{}, errors.Join(context.Cause(ctx), a.Err, rbErr)
		}
		if Transient(a.Err) && round < maxTopologyRetries {
			if err := SleepCtx(ctx, Backoff(round)); err != nil {
				return Grant{}, err
			}
			continue
		}
		return Grant{}, errors.Join(a.Err, rbErr)
	}
}

func (e *Engine) conflictError(set *Set, cs []Conflict) *ConflictError {
	out := &ConflictError{Conflicts: make([]KeyConflict, len(cs))}
	for i, c := range cs {
		out.Conflicts[i] = KeyConflict{Key: set.Keys[c.Index].Name, TTL: c.TTL}
	}
	return out
}

// Transient reports whether err is made only of failures that a new
// attempt can fix: ErrStaleTopology and ErrUnknownOutcome node errors, a
// slot without a master, an unreadable slot map (a failover or a reshard in
// progress).
func Transient(err error) bool {
	if err == nil {
		return false
	}
	var walk func(error) bool
	walk = func(err error) bool {
		if ne, ok := err.(*NodeError); ok {
			return ne.Kind == ErrStaleTopology || ne.Kind == ErrUnknownOutcome
		}
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			for _, e := range j.Unwrap() {
				if !walk(e) {
					return false
				}
			}
			return true
		}
		return errors.Is(err, slot.ErrUncovered) || errors.Is(err, topology.ErrTopology)
	}
	return walk(err)
}

// Lock takes every key of set, waiting as long as ctx allows. It acquires
// in canonical order: each attempt resends every key (the ones it holds
// are refreshed, so all keys end with the same expiry) and each node takes
// its keys up to the first conflict. Whatever the attempt holds ABOVE the
// first key it could not get is given back before it waits, so a waiter
// only ever holds keys below the one it waits for: with a total order, no
// cycle of waiters (deadlock) can form, and a batch never loses the prefix
// it has (no livelock, no starvation by smaller batches racing it).
func (e *Engine) Lock(ctx context.Context, set *Set, r Request, w *Waker) (Grant, error) {
	c := r.Cleanup
	waits := 0
	lastWait := -1
	for first := true; ; first = false {
		if err := ctx.Err(); err != nil {
			return Grant{}, errors.Join(context.Cause(ctx), c.rollback(ctx, e, set, r.Who))
		}
		t0 := time.Now()
		opt := r.options(Prefix)
		opt.First = first
		a := e.Acquire(ctx, set, 0, r.Who, r.TTL, opt)
		f := a.FirstFailure(0)
		if f == set.Len() {
			return e.granted(ctx, set, r, &a, t0)
		}
		if a.Err != nil && !Transient(a.Err) && len(a.Conflicts) == 0 || ctx.Err() != nil {
			// A failure waiting will not fix (a refused script, a wrong
			// type at a lock key) or the caller gave up: give back all.
			return Grant{}, errors.Join(a.Err, context.Cause(ctx), c.rollback(ctx, e, set, r.Who))
		}
		// Give back what lies above the first failure; it runs while we
		// wait, since nothing it does can block on us.
		var above []int
		for i := f + 1; i < set.Len(); i++ {
			if a.State[i] != NotHeld {
				above = append(above, i)
			}
		}
		trimmed := make(chan struct{})
		go func() {
			defer close(trimmed)
			if len(above) > 0 {
				rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.Timeout)
				_, _ = e.Release(rctx, set, above, r.Who)
				cancel()
			}
		}()
		var werr error
		if conflict, ok := conflictAt(a.Conflicts, f); ok {
			if f != lastWait {
				waits, lastWait = 0, f
			}
			werr = w.Wait(ctx, set.Lock[f], conflict.TTL, waits)
			waits++
		} else {
			// A moved slot or a lost reply at f: the engine refreshed its
			// slot map; try again shortly.
			werr = SleepCtx(ctx, Backoff(waits))
			waits++
		}
		<-trimmed
		if werr != nil {
			return Grant{}, errors.Join(werr, c.rollback(ctx, e, set, r.Who))
		}
	}
}

func conflictAt(cs []Conflict, idx int) (Conflict, bool) {
	for _, c := range cs {
		if c.Index == idx {
			return c, true
		}
	}
	return Conflict{}, false
}
