package slot

import (
	"errors"
	"fmt"
	"strings"
)

// DefaultPrefix namespaces every key slotlock writes.
const DefaultPrefix = "slotlock"

// ErrBadPrefix reports a key prefix that would break co-location.
var ErrBadPrefix = errors.New("slot: bad key prefix")

// Namer names the keys slotlock keeps for a user key: the lock key itself
// and the per-slot keys beside it. Every name it makes lands in the SAME
// slot as the user key, so one single-slot script can touch the lock, its
// counters and the user's own data atomically.
//
// Layout, for prefix P and user key K in slot s with tag T = Tag(s):
//
//	P{T}:K       the lock key of K
//	P{T}#fence   the fencing counter of slot s
//	P{T}#n:K     the reentrant hold count of K
//
// Wrapping the user key itself (P{K}) would not do: a user key with braces
// of its own, such as "a}b" or "{x}y", would hash differently once wrapped.
// The per-slot tag sidesteps that: the first '{' of every name is ours and
// the first '}' after it closes our tag, which contains no braces.
//
// Names are injective: the prefix is fixed and free of braces, the tag ends
// at the first '}', and the byte after it (':' or '#') tells lock keys from
// slot keys, so two distinct user keys never share a lock key and no lock
// key equals a counter key.
type Namer struct {
	prefix string
}

// NewNamer returns a Namer for prefix ("" means DefaultPrefix). The prefix
// must not contain '{' or '}': it comes before our tag, and a brace in it
// would move the hash tag.
func NewNamer(prefix string) (Namer, error) {
	if prefix == "" {
		prefix = DefaultPrefix
	}
	if strings.ContainsAny(prefix, "{}") {
		return Namer{}, fmt.Errorf("%w: %q contains a brace", ErrBadPrefix, prefix)
	}
	return Namer{prefix: prefix}, nil
}

// Prefix returns the namespace of every name.
func (n Namer) Prefix() string { return n.prefix }

// LockKey returns the lock key of userKey; it hashes to KeySlot(userKey).
func (n Namer) LockKey(userKey string) string {
	return n.LockKeyInSlot(userKey, KeySlot(userKey))
}

// LockKeyInSlot is LockKey when the caller already knows s = KeySlot(userKey).
func (n Namer) LockKeyInSlot(userKey string, s uint16) string {
	k := Key{Name: userKey, Slot: s}
	var b strings.Builder
	b.Grow(n.lockKeyLen(k))
	n.writeLockKey(&b, k)
	return b.String()
}

// LockKeys returns the lock key of every key of ks (whose slots are known),
// in order. The names share one backing string: one allocation for the
// whole batch instead of one per key.
func (n Namer) LockKeys(ks []Key) []string {
	size := 0
	for _, k := range ks {
		size += n.lockKeyLen(k)
	}
	var b strings.Builder
	b.Grow(size)
	for _, k := range ks {
		n.writeLockKey(&b, k)
	}
	all := b.String()
	out := make([]string, len(ks))
	for i, k := range ks {
		l := n.lockKeyLen(k)
		out[i], all = all[:l], all[l:]
	}
	return out
}

// writeLockKey appends k's lock key, P{T}:K, to b.
func (n Namer) writeLockKey(b *strings.Builder, k Key) {
	b.WriteString(n.prefix)
	b.WriteByte('{')
	b.WriteString(Tag(k.Slot))
	b.WriteString("}:")
	b.WriteString(k.Name)
}

// lockKeyLen is the length of k's lock key.
func (n Namer) lockKeyLen(k Key) int {
	return len(n.prefix) + len("{") + len(Tag(k.Slot)) + len("}:") + len(k.Name)
}

// FenceKey returns the key of slot s's fencing counter.
func (n Namer) FenceKey(s uint16) string {
	return n.prefix + "{" + Tag(s) + "}#fence"
}

// HoldCountKey returns the key of userKey's reentrant hold count.
func (n Namer) HoldCountKey(userKey string) string {
	return n.HoldCountKeyInSlot(userKey, KeySlot(userKey))
}

// HoldCountKeyInSlot is HoldCountKey when the caller already knows
// s = KeySlot(userKey).
func (n Namer) HoldCountKeyInSlot(userKey string, s uint16) string {
	return n.prefix + "{" + Tag(s) + "}#n:" + userKey
}

// SharedKeyInSlot returns the sorted set of userKey's shared holders
// (scored by each holder's expiry), in slot
// s = KeySlot(userKey): P{T}#s:K (companion in batch/scripts/common.lua).
func (n Namer) SharedKeyInSlot(userKey string, s uint16) string {
	return n.prefix + "{" + Tag(s) + "}#s:" + userKey
}

// PermitKeyInSlot returns the hash of the counted resource named
// resource, in slot s = KeySlot(resource): P{T}#p:R.
func (n Namer) PermitKeyInSlot(resource string, s uint16) string {
	return n.prefix + "{" + Tag(s) + "}#p:" + resource
}

// PermitQueueKeyInSlot returns the line of waiters for permits of
// resource in slot s = KeySlot(resource): companion(k, 'q') of its hash
// k in batch/scripts/common.lua.
func (n Namer) PermitQueueKeyInSlot(resource string, s uint16) string {
	return n.prefix + "{" + Tag(s) + "}#q#p:" + resource
}

// QueueKeyInSlot returns userKey's queue of waiters, in slot s =
// KeySlot(userKey) (queue_key in batch/scripts/common.lua).
func (n Namer) QueueKeyInSlot(userKey string, s uint16) string {
	return n.prefix + "{" + Tag(s) + "}#q:" + userKey
}

// InboxInSlot returns the sharded channel on which the Locker id listens
// for messages to its waiters, in slot s (one per node: a script may
// publish only to a channel of its own node).
func (n Namer) InboxInSlot(id string, s uint16) string {
	return n.prefix + "{" + Tag(s) + "}#in:" + id
}

// UserKey returns the user key a lock key was made for, and false when
// lockKey is not a lock key of this Namer.
func (n Namer) UserKey(lockKey string) (string, bool) {
	rest, ok := strings.CutPrefix(lockKey, n.prefix+"{")
	if !ok {
		return "", false
	}
	end := strings.IndexByte(rest, '}')
	if end <= 0 || end+1 >= len(rest) || rest[end+1] != ':' {
		return "", false
	}
	return rest[end+2:], true
}
