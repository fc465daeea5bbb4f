package slotlock

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"

	"github.com/slotlock/slotlock/batch"
	"github.com/slotlock/slotlock/internal/localq"
	"github.com/slotlock/slotlock/internal/protocol"
	"github.com/slotlock/slotlock/internal/topology"
	"github.com/slotlock/slotlock/internal/tracking"
	"github.com/slotlock/slotlock/pipeline"
	"github.com/slotlock/slotlock/slot"
)

// Locker hands out leases on sets of keys of one Redis deployment (a
// cluster or a single server). It is safe for concurrent use; make one per
// client and share it: its goroutines queue for keys in memory, and one
// watchdog renews all its leases.
type Locker struct {
	client rueidis.Client
	opt    Options
	names  slot.Namer
	topo   *topology.Source
	lua    *batch.Engine
	pipe   *pipeline.Engine
	// strategy is the Strategy new leases use: StrategyLua or
	// StrategyPipeline (Auto starts as Lua).
	strategy atomic.Uint32
	log      *slog.Logger  // nil: silent
	obs      Observer      // nil: none
	local    *localq.Table // nil with Options.NoLocalQueue
	dog      *watchdog
	secret   [32]byte // keys owner tokens (WithOwner)
	closed   atomic.Bool
	// track sees lost leases at once (lost.go); nil with
	// Options.NoLossTracking.
	track *tracking.Tracker

	// afterFailure, set only by tests, sees the token of every attempt
	// that returned an error, so a test can prove the attempt left nothing.
	afterFailure func(token string, err error)
}

// New returns a Locker that locks keys through client. It sends nothing
// until the first lock: the slot map is read then.
func New(client rueidis.Client, opt Options) (*Locker, error) {
	if client == nil {
		return nil, fmt.Errorf("%w: nil client", ErrInvalid)
	}
	opt, names, err := opt.withDefaults()
	if err != nil {
		return nil, err
	}
	topo := topology.New(client)
	l := &Locker{
		client: client,
		opt:    opt,
		names:  names,
		topo:   topo,
		lua:    batch.New(client, topo, batch.Options{PerSlot: opt.PerSlot}),
		pipe:   pipeline.New(client, topo),
		log:    opt.Logger,
		obs:    opt.Observer,
	}
	l.strategy.Store(uint32(StrategyLua))
	if opt.Strategy == StrategyPipeline {
		l.strategy.Store(uint32(StrategyPipeline))
	}
	if _, err := rand.Read(l.secret[:]); err != nil {
		return nil, fmt.Errorf("slotlock: secret: %w", err)
	}
	if !opt.NoLocalQueue {
		l.local = localq.New()
	}
	l.dog = newWatchdog(l)
	l.track = newLossTracker(l) // lost.go
	return l, nil
}

// Close stops the Locker: its watchdog stops renewing, and later calls fail
// with ErrClosed. Leases it handed out are not released (other goroutines
// may still be working under them): they end at their deadline unless
// released. The client is the caller's and stays open.
func (l *Locker) Close() error {
	if l.closed.Swap(true) {
		return nil
	}
	l.dog.close()
	if l.track != nil {
		l.track.Close() // lost.go
	}
	l.lua.Close()
	return nil
}

// Lock takes every key, waiting until all are held by one new lease or ctx
// ends. It returns with all keys held or none: on any failure (ctx done, a
// Redis error) whatever was taken is released before it returns.
//
// Waiting is starvation-free inside one process (the oldest waiter's keys
// are reserved for it) and deadlock-free everywhere: keys are taken in
// Redis in one global order and a waiter gives back everything above the
// key it waits for.
//
// With an owner in ctx (WithOwner), keys the owner already holds are taken
// again: each lease is one hold.
func (l *Locker) Lock(ctx context.Context, keys ...string) (*Lease, error) {
	return l.acquire(ctx, keys, true)
}

// TryLock makes one attempt to take every key. If any is held by someone
// else it returns an error matching ErrNotAcquired, a *ConflictError that
// names the held keys and how long their locks have left, and holds none.
func (l *Locker) TryLock(ctx context.Context, keys ...string) (*Lease, error) {
	return l.acquire(ctx, keys, false)
}

// Do takes every key (waiting like Lock), runs fn with a context that is
// cancelled if the lease is lost (its cause is then ErrLeaseLost), and
// releases the keys whatever fn returns. It returns fn's error joined with
// the lease's loss and any release error.
func (l *Locker) Do(ctx context.Context, keys []string, fn func(ctx context.Context) error) error {
	if fn == nil {
		// Refused before locking: a nil call would panic with the keys
		// held, and the watchdog would keep them until the process died.
		return fmt.Errorf("%w: Do with a nil function", ErrInvalid)
	}
	lease, err := l.Lock(ctx, keys...)
	if err != nil {
		return err
	}
	lctx, cancel := lease.Context(ctx)
	ferr := fn(lctx)
	cancel()
	lost := lease.lostErr()
	rctx, stop := context.WithTimeout(context.WithoutCancel(ctx), l.opt.CleanupTimeout)
	defer stop()
	rerr := lease.Release(rctx)
	if lost != nil && errors.Is(rerr, ErrNotHeld) {
		rerr = nil // the same loss, reported once
	}
	return errors.Join(ferr, lost, rerr)
}

func (l *Locker) validate(ctx context.Context, keys []string) error {
	if l.closed.Load() {
		return ErrClosed
	}
	if len(keys) == 0 {
		return fmt.Errorf("%w: no keys", ErrInvalid)
	}
	if len(keys) > l.opt.MaxKeys {
		return fmt.Errorf("%w: %d keys, more than MaxKeys %d", ErrInvalid, len(keys), l.opt.MaxKeys)
	}
	for i, k := range keys {
		if k == "" {
			return fmt.Errorf("%w: key %d is empty", ErrInvalid, i)
		}
	}
	if err := ctx.Err(); err != nil {
		return withPrefix("lock", context.Cause(ctx))
	}
	return nil
}

func (l *Locker) acquire(ctx context.Context, keys []string, wait bool) (*Lease, error) {
	o := acquireOptions{ttl: l.opt.TTL}
	if wait {
		o.wait = WaitForever
	}
	return l.acquireWith(ctx, keys, nil, o)
}

// acquireOptions are the per-call settings of an acquisition (the
// Locker's for Lock and TryLock, the request's for Acquire).
type acquireOptions struct {
	ttl  time.Duration
	wait time.Duration // 0: one attempt; WaitForever: until ctx ends
}

// acquireWith is one acquisition: of keys (all exclusive: Lock, TryLock)
// when entries is nil, else of a request's entries (Acquire, checked by
// checkRequest).
func (l *Locker) acquireWith(ctx context.Context, keys []string, entries []protocol.Entry, o acquireOptions) (*Lease, error) {
	if l.obs != nil {
		return l.observedAcquire(ctx, keys, entries, o) // observe.go
	}
	// With a Logger the protocol counts too: its record of a failed
	// rollback is what the log line reports (no allocation: the counts
	// live in the lease).
	le, err := l.take(ctx, keys, entries, o, l.log != nil)
	if err != nil {
		return nil, err
	}
	return le, nil
}

// take is one acquisition (see acquireWith); with count, the protocol
// counts what it does into le.stats. On failure it returns the lease it
// made, if it made one, for those counts: it holds nothing.
func (l *Locker) take(ctx context.Context, keys []string, entries []protocol.Entry, o acquireOptions, count bool) (*Lease, error) {
	var set *protocol.Set
	if entries == nil {
		if err := l.validate(ctx, keys); err != nil {
			return nil, err
		}
		set = protocol.NewSet(l.names, keys)
	} else {
		if err := ctx.Err(); err != nil {
			return nil, withPrefix("lock", context.Cause(ctx))
		}
		set = protocol.NewRequestSet(l.names, entries)
	}
	wait := o.wait > 0
	if wait && o.wait != WaitForever {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, o.wait, fmt.Errorf("%w: still held after waiting %v", ErrNotAcquired, o.wait))
		defer cancel()
	}
	token, err := newToken()
	if err != nil {
		return nil, err
	}
	le := newLease(l, set, token, ctx)
	if l.local != nil && !set.HasPermits() {
		// The in-process table is keyed by lock key: one per user key
		// under this Locker's prefix, and already named by the Set; its
		// shared holders of a key do not exclude each other. Permits
		// queue in Redis only: the table has no counted resources.
		le.holder.Shared = sharedKeys(set)
		if wait {
			var w0 time.Time
			if count {
				w0 = time.Now()
			}
			err := l.local.Acquire(ctx, le.set.Lock, le.holder)
			if count {
				le.stats.Waited += time.Since(w0)
			}
			if err != nil {
				return le, err
			}
		} else if cs := l.local.TryAcquire(le.set.Lock, le.holder); cs != nil {
			return le, localConflict(le.set, cs)
		}
	}
	req := &le.req // kept in the lease: one allocation fewer per lock
	*req = protocol.Request{
		Who:            le.who,
		TTL:            o.ttl,
		Fencing:        l.opt.Fencing,
		MinReplicas:    l.opt.MinReplicas,
		ReplicaTimeout: l.opt.ReplicaTimeout,
		WarnOnReplicas: l.opt.WarnOnReplicas,
		CleanupTimeout: l.opt.CleanupTimeout,
	}
	if count {
		req.Stats = &le.stats
	}
	var g protocol.Grant
	restarts := 0
	for {
		var s Strategy
		le.eng, s = l.current()
		le.strategy = s
		if s == StrategyPipeline {
			if err = pipelineSupports(req, le.set); err != nil {
				break
			}
		}
		if wait {
			g, err = protocol.Lock(ctx, le.eng, le.set, req)
		} else {
			g, err = protocol.TryLock(ctx, le.eng, le.set, req)
		}
		if err != nil && s == StrategyLua && scriptsDenied(err) && l.fallBack(err) {
			continue // the refused scripts wrote nothing
		}
		if err != nil && errors.Is(err, protocol.ErrUnsettled) && ctx.Err() == nil {
			// A call that could delete or give away keys under this
			// token may still run after any later one: the protocol
			// rolled back, and the acquisition goes on under a new
			// token, which no late call of the old one can touch.
			restarts++
			if err = protocol.SleepCtx(ctx, protocol.Backoff(restarts)); err != nil {
				break
			}
			if err = le.newToken(); err != nil {
				break
			}
			req.Who = le.who
			continue
		}
		break
	}
	if err != nil {
		if l.local != nil && !set.HasPermits() {
			l.local.Release(le.set.Lock, le.holder)
		}
		if rb := le.stats.RollbackErr; rb != nil && l.log != nil {
			l.log.Warn("slotlock: a rollback could not reach a node; its keys stay locked until their TTL",
				"prefix", l.names.Prefix(), "keys", le.set.Len(), "ttl", o.ttl, "cause", public(rb))
		}
		err = withPrefix("lock", public(err))
		if l.afterFailure != nil {
			l.afterFailure(token, err)
		}
		return le, err
	}
	req.Stats = nil // le.stats stays readable; nothing counts into it any more
	le.granted(g)
	l.dog.add(le)
	l.watchLoss(le) // lost.go
	return le, nil
}

// withPrefix makes err's message start with "slotlock:", naming op, unless
// it already does (a context's cause, or an error of package slot, do
// not).
func withPrefix(op string, err error) error {
	switch err.(type) {
	case nil, *ConflictError, *NodeError, *ReplicaError, *LostError:
		// Ours, prefixed already: no message built (a ConflictError's
		// names every conflicting key).
		return err
	}
	if strings.HasPrefix(err.Error(), "slotlock:") {
		return err
	}
	return fmt.Errorf("slotlock: %s: %w", op, err)
}

func localConflict(set *protocol.Set, cs []localq.Conflict) error {
	out := &ConflictError{Conflicts: make([]KeyConflict, len(cs))}
	for i, c := range cs {
		out.Conflicts[i] = KeyConflict{Key: set.Keys[c.Index].Name, TTL: c.TTL, Local: true}
	}
	return out
}

// newToken returns 128 random bits, URL-safe: the owner token written into
// every lock key of a lease. Only its holder can release or extend them.
func newToken() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("slotlock: token: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b[:]), nil
}

// sharedKeys returns, per key of set, whether the request wants it shared
// (localq.Holder.Shared); nil when every key is exclusive.
func sharedKeys(set *protocol.Set) []bool {
	if set.Plain() {
		return nil
	}
	out := make([]bool, set.Len())
	for i := range out {
		out[i] = set.KindOf(i) == protocol.Shared
	}
	return out
}
