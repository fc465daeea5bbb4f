package slotlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/redis/rueidis"

	"github.com/slotlock/slotlock/batch"
	"github.com/slotlock/slotlock/internal/localq"
	"github.com/slotlock/slotlock/internal/protocol"
	"github.com/slotlock/slotlock/internal/tracking"
	"github.com/slotlock/slotlock/slot"
)

// ErrReleased is the cause a lease's context gets when the lease is
// released.
var ErrReleased = errors.New("slotlock: lease released")

// Lease is a set of keys held together under one owner token. Its life is
// visible: Done closes when it ends (released, or lost), and Context gives
// work a context that is cancelled at that moment.
type Lease struct {
	l      *Locker
	set    *protocol.Set
	token  string
	who    protocol.Who
	holder *localq.Holder
	renew  bool
	eng    engine // the strategy that took the keys releases them
	req    protocol.Request
	// For an Observer and the Logger (observe.go): what the acquisition
	// did, with which strategy, and since when the lease holds its keys.
	stats     protocol.Stats
	strategy  Strategy
	grantedAt time.Time

	mu       sync.Mutex
	deadline time.Time
	fences   []int64
	warning  error
	ended    bool
	released bool
	// abandoned: a Release ran out of time before the release script
	// answered. The watchdog stops renewing the lease, so that its keys
	// expire by their TTL as Release promises, and ends it as released at
	// its deadline; a later Release may still delete the keys at once.
	abandoned bool
	cause     error // ErrReleased, or a *LostError
	done      chan struct{}
	onEnd     map[*struct{}]func(error)
	watch     tracking.Watch // the loss tracker's view (lost.go)
	watching  bool           // watch is with the tracker
}

func newLease(l *Locker, set *protocol.Set, token string, ctx context.Context) *Lease {
	le := &Lease{
		l:      l,
		set:    set,
		token:  token,
		who:    protocol.Who{Holder: token},
		holder: &localq.Holder{},
		renew:  l.opt.Renew == RenewAlways,
		done:   make(chan struct{}),
	}
	if id, ok := OwnerFrom(ctx); ok {
		owner := l.ownerToken(id)
		le.who = protocol.Who{Holder: owner, Lease: token}
		le.holder.Owner = owner
	}
	return le
}

// newToken gives a lease not yet granted a new token (an acquisition that
// must not be granted under its first one: protocol.ErrUnsettled). An
// owner's lease keeps the owner token and changes its lease token, which is
// what its calls' hold counts are written under.
func (le *Lease) newToken() error {
	token, err := newToken()
	if err != nil {
		return err
	}
	le.token = token
	if le.who.Lease != "" {
		le.who.Lease = token
	} else {
		le.who.Holder = token
	}
	return nil
}

func (le *Lease) granted(g protocol.Grant) {
	le.mu.Lock()
	defer le.mu.Unlock()
	le.deadline = g.Deadline
	le.grantedAt = g.At
	le.fences = g.Fences
	le.warning = g.Warning
	le.holder.SetDeadline(g.Deadline)
	if le.l.local != nil {
		le.l.local.Granted(le.set.Lock, le.holder) // readers waiting to join it
	}
}

// Keys returns the lease's keys in canonical order (by hash slot, then
// bytes), duplicates removed. A lease of Locker.Acquire lists its
// exclusive and shared keys and the resources of its permits.
func (le *Lease) Keys() []string {
	out := make([]string, le.set.Len())
	for i, k := range le.set.Keys {
		out[i] = k.Name
	}
	return out
}

// Token returns the lease's token: 128 random bits. Without an owner it is
// the value of every one of its lock keys.
func (le *Lease) Token() string { return le.token }

// Deadline returns when the lease's keys expire unless renewed or extended,
// as seen by this client: the moment the granting (or renewing) request was
// SENT plus the TTL. Redis set the expiry when it RECEIVED the request, so
// the real expiry is no earlier, up to clock-rate drift between client and
// server. This holds for every grant, whatever path it took (the fast
// path, a waiter's grant after a wait, in-process or across processes):
// a holder paused for less than its TTL finds its keys still its own.
func (le *Lease) Deadline() time.Time {
	le.mu.Lock()
	defer le.mu.Unlock()
	return le.deadline
}

// FencingToken returns the fencing token of key's grant, with
// Options.Fencing: a number that is larger than the token of every earlier
// grant of that key, to whomever. A store that remembers the largest token
// it has seen per key and refuses writes with a smaller one cannot be
// corrupted by a holder that lost its lease without knowing (a long pause).
// Across a failover, no token is handed out twice and a grant of the
// deposed master is below every grant of its successor, even when
// replication lost the lock itself: the token carries the master's config
// epoch in its high bits (epoch * 2^32 + n, below 2^53; docs/safety.md).
// It returns false when fencing is off or key is not one of the lease's.
func (le *Lease) FencingToken(key string) (int64, bool) {
	le.mu.Lock()
	defer le.mu.Unlock()
	if le.fences == nil {
		return 0, false
	}
	i, ok := le.index(key)
	if !ok {
		return 0, false
	}
	if le.set.KindOf(i) != protocol.Exclusive {
		return 0, false // a shared grant or a permit: no token (docs/design.md, "Shared keys and permits")
	}
	return le.fences[i], true
}

func (le *Lease) index(key string) (int, bool) {
	k := slot.Key{Name: key, Slot: slot.KeySlot(key)}
	lo, hi := 0, le.set.Len()
	for lo < hi {
		m := (lo + hi) / 2
		if slot.Less(le.set.Keys[m], k) {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo, lo < le.set.Len() && le.set.Keys[lo].Name == key
}

// Warning returns the replica shortfall of the grant, with
// Options.WarnOnReplicas, and nil otherwise.
func (le *Lease) Warning() error {
	le.mu.Lock()
	defer le.mu.Unlock()
	return le.warning
}

// Done returns a channel that is closed when the lease ends: released, or
// lost (a key expired, was deleted by hand, or was taken after expiry).
// The watchdog notices a loss within one renewal period (TTL/3).
func (le *Lease) Done() <-chan struct{} { return le.done }

// Err returns nil while the lease is alive, ErrReleased after Release, or a
// *LostError (errors.Is ErrLeaseLost and ErrNotHeld) naming the lost keys.
// It reads the clock: once the Deadline has passed without a renewal
// (the process was paused longer than the TTL, say), the lease ends as
// lost in this call, and its contexts are cancelled before it returns,
// whether or not the watchdog has run since. Guard and Extend check it
// first.
func (le *Lease) Err() error {
	le.mu.Lock()
	cause, ended, deadline := le.cause, le.ended, le.deadline
	le.mu.Unlock()
	if ended || deadline.IsZero() || time.Now().Before(deadline) {
		return cause
	}
	le.expire()
	le.mu.Lock()
	defer le.mu.Unlock()
	return le.cause
}

// Context returns a context derived from parent that is cancelled when the
// lease ends, with Err's value as its cause (context.Cause). Call cancel
// when the work is done.
func (le *Lease) Context(parent context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(parent)
	le.mu.Lock()
	if le.ended {
		cause := le.cause
		le.mu.Unlock()
		cancel(cause)
		return ctx, func() {}
	}
	id := new(struct{})
	if le.onEnd == nil {
		le.onEnd = make(map[*struct{}]func(error))
	}
	le.onEnd[id] = cancel
	le.mu.Unlock()
	return ctx, func() {
		le.mu.Lock()
		delete(le.onEnd, id)
		le.mu.Unlock()
		cancel(context.Canceled)
	}
}

// end records how the lease ended, once, and tells every waiter.
func (le *Lease) end(cause error) bool {
	le.mu.Lock()
	if le.ended {
		le.mu.Unlock()
		return false
	}
	le.ended = true
	le.cause = cause
	fns := le.onEnd
	le.onEnd = nil
	le.mu.Unlock()
	if le.l.obs != nil || le.l.log != nil {
		// Before Done closes: whoever waits on it finds the end counted.
		le.report(cause) // observe.go
	}
	close(le.done)
	for _, fn := range fns {
		fn(cause)
	}
	le.l.dog.remove(le)
	le.forgetLoss() // lost.go
	if le.l.local != nil {
		// A lost lease no longer holds its keys for the local waiters
		// either; Redis still guards whatever it does hold.
		le.l.local.Release(le.set.Lock, le.holder)
	}
	return true
}

func (le *Lease) lostErr() error {
	le.mu.Lock()
	defer le.mu.Unlock()
	if errors.Is(le.cause, ErrLeaseLost) {
		return le.cause
	}
	return nil
}

// lose ends the lease because the keys idx were found not held.
func (le *Lease) lose(idx []int) {
	le.end(le.lostError(idx))
}

// expire ends a lease whose deadline passed without a renewal: every key
// may be gone. A lease whose Release ran out of time ends as released: its
// keys expired, as its holder was told they would.
func (le *Lease) expire() {
	le.mu.Lock()
	abandoned := le.abandoned && !le.released
	if abandoned {
		le.released = true
	}
	le.mu.Unlock()
	if abandoned {
		le.end(ErrReleased)
		return
	}
	le.end(le.lostError(allOf(le.set.Len())))
}

// renewing reports whether the watchdog's tick should renew the lease.
func (le *Lease) renewing() bool {
	le.mu.Lock()
	defer le.mu.Unlock()
	return le.renew && !le.abandoned
}

func allOf(n int) []int {
	idx := make([]int, n)
	for i := range idx {
		idx[i] = i
	}
	return idx
}

// renewed records a renewal that answered for every key: each is now held
// until deadline at the earliest.
func (le *Lease) renewed(deadline time.Time) {
	le.mu.Lock()
	defer le.mu.Unlock()
	if deadline.After(le.deadline) {
		le.deadline = deadline
		le.holder.SetDeadline(deadline)
	}
}

// Release deletes every lock key the lease still holds, owner-checked: a key
// that expired and was taken by someone else is left alone. It is
// idempotent: after the first call it returns nil. If some keys were no
// longer held it returns a *LostError naming them (errors.Is ErrNotHeld).
// A reentrant lease gives up its hold; the key stays locked while other
// leases of the same owner hold it.
//
// If ctx ends before every node answered, Release returns an error and the
// lease is no longer renewed: its keys expire by their TTL, and the lease
// ends with ErrReleased at its Deadline. (A renewal already sent may still
// reach a slow node later and keep a key up to one TTL past its arrival.)
// Calling Release again with time to spare deletes them at once.
func (le *Lease) Release(ctx context.Context) error {
	le.mu.Lock()
	released := le.released
	le.mu.Unlock()
	if released {
		return nil
	}
	if le.l.obs == nil {
		return le.release(ctx)
	}
	start := time.Now()
	err := le.release(ctx)
	end := time.Now()
	le.l.obs.Released(ReleaseEvent{Ctx: ctx, Lease: le, KeyCount: le.set.Len(), Nodes: le.l.nodesOf(le.set),
		Start: start, Latency: end.Sub(start), Held: le.heldFor(end), Outcome: outcomeOf(err, OutcomeReleased), Err: err})
	return err
}

// release is Release once it is known the lease was not released yet.
func (le *Lease) release(ctx context.Context) error {
	var released bool
	le.forgetLoss() // lost.go: our own DELs are not a loss
	r := le.eng.Release(ctx, le.set, nil, le.who)
	lost, err := r.Lost, public(r.Err)
	if err != nil && ctx.Err() != nil {
		// Not done: the caller may call again with time to spare. The
		// keys must expire by their TTL in any case, so the watchdog
		// stops renewing them (a caller that gave up would otherwise
		// hold them for the life of the Locker).
		le.mu.Lock()
		le.abandoned = true
		le.mu.Unlock()
		return fmt.Errorf("slotlock: release (the keys expire by their TTL unless Release is called again): %w", err)
	}
	le.mu.Lock()
	released, le.released = le.released, true
	le.mu.Unlock()
	if released {
		return nil // a concurrent Release got there first
	}
	le.end(ErrReleased) // no-op after a loss: Err keeps reporting the loss
	if err != nil {
		return fmt.Errorf("slotlock: release: %w", err)
	}
	return le.lostError(lost)
}

// Extend sets the expiry of every key to ttl from now, all or nothing per
// script call (a node's keys, 512 at most per call). If any key is no
// longer held it returns a *LostError naming the lost keys, and the lease
// ends as lost; keys of other calls may have been extended. On a renewing
// lease, renewals keep at least the extended expiry.
func (le *Lease) Extend(ctx context.Context, ttl time.Duration) error {
	if err := checkTTL(ttl); err != nil {
		return err
	}
	if err := le.Err(); err != nil {
		return fmt.Errorf("%w: %w", ErrNotHeld, err)
	}
	t0 := time.Now()
	r := le.eng.ExtendMany(ctx, []protocol.ExtendJob{{Set: le.set, Who: le.who, TTL: ttl,
		MinReplicas: le.l.opt.MinReplicas, ReplicaTimeout: le.l.opt.ReplicaTimeout}})
	lost, err := r[0].Lost, public(r[0].Err)
	if len(lost) == 0 && err != nil {
		// Not extended everywhere, or not acknowledged by the replicas:
		// the deadline stays where it was.
		return fmt.Errorf("slotlock: extend: %w", err)
	}
	if len(lost) > 0 {
		le.lose(lost)
		return le.lostError(lost)
	}
	le.mu.Lock()
	le.deadline = t0.Add(ttl)
	le.holder.SetDeadline(le.deadline)
	le.mu.Unlock()
	le.rearmLoss() // lost.go
	return nil
}

// Guard runs one Redis command on the user's keys only while the lease
// still holds its keys in the same slot: the check and the command run in
// one script, so nobody can take the lock in between. keys are the keys the
// command touches, all in one slot, in which the lease must hold at least
// one key; cmd is the command and its arguments, e.g.
//
//	lease.Guard(ctx, []string{"order:42"}, "SET", "order:42", "paid")
//
// It returns the command's reply as Redis gave it, a nil reply included
// (GET of a missing key, SET NX of one that exists: msg.IsNil() is true and
// the error nil). If a lease key of that slot is no longer held the command
// does not run and Guard returns a *LostError (errors.Is ErrLeaseLost) and
// the lease ends as lost.
func (le *Lease) Guard(ctx context.Context, keys []string, cmd ...string) (rueidis.RedisMessage, error) {
	if len(keys) == 0 || len(cmd) == 0 {
		return rueidis.RedisMessage{}, fmt.Errorf("%w: Guard needs keys and a command", ErrInvalid)
	}
	s := slot.KeySlot(keys[0])
	for _, k := range keys[1:] {
		if slot.KeySlot(k) != s {
			return rueidis.RedisMessage{}, fmt.Errorf("%w: Guard keys %q and %q are in different slots", ErrInvalid, keys[0], k)
		}
	}
	// Only exclusive keys guard a write: a shared hold is every reader's
	// and entitles none of them to write.
	idx := slices.DeleteFunc(le.set.SlotIndexes(s), func(i int) bool { return le.set.KindOf(i) != protocol.Exclusive })
	if len(idx) == 0 {
		return rueidis.RedisMessage{}, fmt.Errorf("%w: the lease holds no exclusive key in slot %d of %q", ErrInvalid, s, keys[0])
	}
	if err := le.Err(); err != nil {
		return rueidis.RedisMessage{}, err
	}
	lua, ok := le.eng.(*batch.Engine)
	if !ok {
		return rueidis.RedisMessage{}, fmt.Errorf("%w: guarded writes need scripts (strategy %v)", ErrUnsupported, StrategyPipeline)
	}
	msg, lost, err := lua.Guard(ctx, le.set, idx, le.who, keys, cmd)
	if err != nil {
		return rueidis.RedisMessage{}, withPrefix("guard", public(err))
	}
	if len(lost) > 0 {
		le.lose(lost)
		return rueidis.RedisMessage{}, le.lostError(lost)
	}
	return msg, nil
}

func (le *Lease) lostError(lost []int) error {
	if len(lost) == 0 {
		return nil
	}
	e := &LostError{Keys: make([]string, len(lost))}
	for i, idx := range lost {
		e.Keys[i] = le.set.Keys[idx].Name
	}
	return e
}
