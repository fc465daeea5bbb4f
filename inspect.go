package slotlock

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/rueidis"

	"github.com/slotlock/slotlock/internal/lockval"
	"github.com/slotlock/slotlock/internal/rediserr"
	"github.com/slotlock/slotlock/slot"
)

// KeyInfo is what Inspect found at one key: who holds its lock, until
// when, and who waits for it.
type KeyInfo struct {
	Key     string // the user key
	LockKey string // the Redis key slotlock keeps for it
	Slot    uint16
	Node    string // the master that owns Slot, as the slot map says
	// Held: a lease holds the key. Reserved: a release handed the key to
	// the waiter ReservedFor, whose next attempt takes it; nobody else
	// can. A key is free when neither is true.
	Held     bool
	Reserved bool
	// Holder is a short, non-secret form of the holder written into the
	// key: Lease.ID of a plain lease, Locker.OwnerID of the owner of
	// reentrant holds. It is a hash prefix: it names a holder but cannot
	// release or extend anything.
	Holder string
	// Holds is the number of leases holding the key: the size of its hold
	// set for reentrant holds, the number of live readers of a shared key
	// (Readers), else 1 while it is held.
	Holds int
	// Shared: readers hold the key (Request.Shared). Readers names them
	// (Lease.ID of each), latest expiry first, at most MaxInspectWaiters;
	// Holder names the reader only while there is one (the key's
	// one-holder form). A reader whose expiry passed (a crashed one, not
	// yet pruned) is not listed. With more than MaxInspectWaiters readers
	// Holds is the size of the holders set, which may still count such
	// expired readers.
	Shared  bool
	Readers []string
	// Reentrant: the holder is an owner (WithOwner), Holds counts its
	// leases.
	Reentrant bool
	// TTL is the lock's remaining life (held or reserved); -1 if it has no
	// expiry (written by hand: slotlock never writes one), 0 when free.
	TTL time.Duration
	// Fence is the fencing token of the grant, 0 without fencing.
	Fence int64
	// ReservedFor is the short form (Lease.ID) of the waiter a reserved
	// key is handed to.
	ReservedFor string
	// Marked: a waiter marked the key, so its release hands it to the
	// oldest waiter in line (or wakes the waiters).
	Marked bool
	// Waiters is the key's line in Redis (waiters of other processes and
	// of this one; docs/design.md, "Waiting in line across processes"),
	// oldest first, at most MaxInspectWaiters of them; WaitersTotal
	// counts them all.
	Waiters      []Waiter
	WaitersTotal int
	// Err is the failure of the reads of this key (an unreachable node, a
	// lock key of another type); the other fields are then zero but Key,
	// LockKey, Slot and Node.
	Err error
}

// Waiter is one acquisition in a key's line.
type Waiter struct {
	ID       string    // Lease.ID of the waiting acquisition
	Joined   time.Time // server time of its first join
	Deadline time.Time // server time at which it leaves the line unless it joins again
}

// MaxInspectWaiters bounds the waiters Inspect lists per key.
const MaxInspectWaiters = 100

// lastWaiter is the last queue index Inspect reads (ZRANGE's stop).
var lastWaiter = strconv.Itoa(MaxInspectWaiters - 1)

// ID returns a short, non-secret name of the lease: what Inspect shows as
// the holder of its keys (without an owner) and as a waiter. Log it to
// find a lease in an inspection; unlike Token it cannot release anything.
func (le *Lease) ID() string { return lockval.Short(le.token) }

// OwnerID returns the short, non-secret name Inspect shows as the holder
// of keys that owner id (WithOwner) holds through this Locker.
func (l *Locker) OwnerID(id string) string { return lockval.Short(l.ownerToken(id)) }

// inspectReads is the number of commands Inspect sends per key.
const inspectReads = 8

// Inspect reports, per key and in the order given, the state of its lock
// in Redis: holder, remaining life, holds, fencing token, reservation and
// line. It only reads: one pipeline per node, all nodes in parallel
// (after the slot map is read, once per Locker). The reads of one key are
// not a transaction: a key that changes while they run may show, say,
// the new holder with the old TTL.
//
// A failed read does not stop the others: that key's KeyInfo.Err says
// why, and the returned error joins every such failure (a *NodeError
// naming the node).
func (l *Locker) Inspect(ctx context.Context, keys ...string) ([]KeyInfo, error) {
	nodeOf, err := l.inspectNodes(ctx, "inspect", keys)
	if err != nil {
		return nil, err
	}
	out := make([]KeyInfo, len(keys))
	cmds := make(rueidis.Commands, 0, inspectReads*len(keys))
	b := l.client.B()
	for i, k := range keys {
		s := slot.KeySlot(k)
		lock := l.names.LockKeyInSlot(k, s)
		q := l.names.QueueKeyInSlot(k, s)
		out[i] = KeyInfo{Key: k, LockKey: lock, Slot: s, Node: nodeOf(s)}
		cmds = append(cmds,
			b.Get().Key(lock).Build(),
			b.Pttl().Key(lock).Build(),
			b.Hlen().Key(l.names.HoldCountKeyInSlot(k, s)).Build(),
			b.Zcard().Key(q).Build(),
			b.Zrange().Key(q).Min("0").Max(lastWaiter).Withscores().Build(),
			// The server's clock, for the readers' expiries: PEXPIRETIME
			// less PTTL of the same key, read one after the other.
			b.Pexpiretime().Key(lock).Build(),
			b.Zrange().Key(l.names.SharedKeyInSlot(k, s)).Min("+inf").Max("-inf").Byscore().Rev().
				Limit(0, MaxInspectWaiters).Withscores().Build(),
			b.Zcard().Key(l.names.SharedKeyInSlot(k, s)).Build(),
		)
	}
	return out, readAll(out, l.client.DoMulti(ctx, cmds...), inspectReads)
}

// inspectNodes checks an inspection's names (keys or resources) as every
// call does, and returns the master of a slot by the Locker's slot map
// ("" when none serves it).
func (l *Locker) inspectNodes(ctx context.Context, op string, names []string) (func(uint16) string, error) {
	if err := l.validate(ctx, names); err != nil {
		return nil, withPrefix(op, err)
	}
	m, err := l.topo.Current(ctx)
	if err != nil {
		return nil, fmt.Errorf("slotlock: %s: slot map: %w", op, err)
	}
	return func(s uint16) string {
		if o := m.Owner(s); o >= 0 {
			return m.Addrs[o]
		}
		return ""
	}, nil
}

// serverNow reads the server's time (ms) off one key's PTTL and
// PEXPIRETIME, read one after the other; known is false when the key has
// no expiry or is gone (slotlock never writes a key without one).
func serverNow(pttl, at rueidis.RedisResult) (now int64, known bool, err error) {
	left, err := pttl.AsInt64()
	if err != nil {
		return 0, false, err
	}
	expires, err := at.AsInt64()
	if err != nil {
		return 0, false, err
	}
	return expires - left, left >= 0 && expires >= 0, nil
}

// readAll hands each inspected item its per replies of res, in order, and
// joins the failures, each recorded on its item.
func readAll[T any, P interface {
	*T
	read([]rueidis.RedisResult) error
	failed(error) error
}](out []T, res []rueidis.RedisResult, per int) error {
	var errs []error
	for i := range out {
		if err := P(&out[i]).read(res[per*i : per*(i+1)]); err != nil {
			errs = append(errs, P(&out[i]).failed(err))
		}
	}
	return errors.Join(errs...)
}

// failed records a failed read of k: a *NodeError classified by the reply
// itself, naming the node and the key.
func (k *KeyInfo) failed(err error) error {
	k.Err = &NodeError{Node: k.Node, Op: "inspect", Keys: 1,
		Kind: rediserr.Kind(err), Err: fmt.Errorf("key %q: %w", k.Key, err)}
	return k.Err
}

// read fills k from its replies (inspectReads of them, in the order
// Inspect sends them).
func (k *KeyInfo) read(r []rueidis.RedisResult) error {
	for _, x := range r {
		if err := x.Error(); err != nil && !rediserr.IsNil(err) {
			return err
		}
	}
	v, err := r[0].ToString()
	switch {
	case rediserr.IsNil(err):
		// free: no holder, no reservation (the line may outlive the
		// key for a moment)
	case err != nil:
		return err
	default:
		p := lockval.Parse(v)
		k.Marked = p.Marked
		if p.Waiter != "" {
			k.Reserved, k.ReservedFor = true, lockval.Short(p.Waiter)
		} else {
			k.Held, k.Fence, k.Shared = true, p.Fence, p.Shared
			if p.Holder != "" { // empty for a shared key's set form
				k.Holder = lockval.Short(p.Holder)
			}
		}
		ttl, err := r[1].AsInt64()
		if err != nil {
			return err
		}
		switch {
		case ttl >= 0:
			k.TTL = time.Duration(ttl) * time.Millisecond
		case ttl == -1:
			k.TTL = -1
		}
	}
	holds, err := r[2].AsInt64()
	if err != nil {
		return err
	}
	if k.Held {
		k.Holds, k.Reentrant = max(int(holds), 1), holds > 0
	}
	if k.Shared {
		if err := k.readReaders(r[1], r[5], r[6], r[7]); err != nil {
			return err
		}
	}
	total, err := r[3].AsInt64()
	if err != nil {
		return err
	}
	k.WaitersTotal = int(total)
	line, err := r[4].AsZScores()
	if err != nil {
		return err
	}
	for _, w := range line {
		e := lockval.QueueEntry(w.Member)
		k.Waiters = append(k.Waiters, Waiter{ID: lockval.Short(e.Token), Joined: lockval.QueueJoined(w.Score), Deadline: e.Deadline})
	}
	return nil
}

// readers fills a shared key's Readers and Holds from its holders set
// (members scored by expiry, ms of server time, latest first), judged by
// the server's time read off the lock key (serverNow).
// In the one-holder form the set is absent and the holder is the reader.
func (k *KeyInfo) readReaders(pttl, at, set, card rueidis.RedisResult) error {
	if k.Holder != "" {
		k.Readers, k.Holds = []string{k.Holder}, 1
		return nil
	}
	now, known, err := serverNow(pttl, at)
	if err != nil {
		return err
	}
	members, err := set.AsZScores()
	if err != nil {
		return err
	}
	total, err := card.AsInt64()
	if err != nil {
		return err
	}
	for _, m := range members {
		if known && m.Score <= float64(now) {
			break // expired, and so is every later one (latest first)
		}
		k.Readers = append(k.Readers, lockval.Short(m.Member))
	}
	k.Holds = len(k.Readers)
	if len(members) == MaxInspectWaiters && k.Holds == MaxInspectWaiters {
		k.Holds = int(total)
	}
	return nil
}
