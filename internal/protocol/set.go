package protocol

import (
	"cmp"
	"slices"
	"strings"

	"github.com/slotlock/slotlock/slot"
)

// Set is the fixed key set of one lease: the user keys in canonical order
// (slot, then bytes; duplicates removed) and, at the same index, the lock key
// that stands for each of them. Every attempt, extension and release of the
// lease works on indexes into a Set.
type Set struct {
	Keys []slot.Key
	Lock []string
	// Kinds is nil when every key is exclusive; a request with shared
	// keys or permits has one entry per key (NewRequestSet).
	Kinds []Entry
	names slot.Namer
}

// NewSet orders keys canonically and names their lock keys.
func NewSet(names slot.Namer, keys []string) *Set {
	ks := slot.Sorted(keys)
	return &Set{Keys: ks, Lock: names.LockKeys(ks), names: names}
}

// Len returns the number of distinct keys.
func (s *Set) Len() int { return len(s.Keys) }

// FenceKey returns the fencing counter of key i's slot (slot_key(k,
// '#fence') in batch/scripts/common.lua).
func (s *Set) FenceKey(i int) string { return s.names.FenceKey(s.Keys[i].Slot) }

// HoldKey returns the hold set of key i (companion in batch/scripts/common.lua).
func (s *Set) HoldKey(i int) string {
	return s.names.HoldCountKeyInSlot(s.Keys[i].Name, s.Keys[i].Slot)
}

// QueueKey returns the queue of key i (queue_key in
// batch/scripts/common.lua).
func (s *Set) QueueKey(i int) string {
	if s.KindOf(i) == Permit {
		return s.names.PermitQueueKeyInSlot(s.Keys[i].Name, s.Keys[i].Slot)
	}
	return s.names.QueueKeyInSlot(s.Keys[i].Name, s.Keys[i].Slot)
}

// Inbox returns the sharded channel of Locker id in slot sl
// (slot.Namer.InboxInSlot).
func (s *Set) Inbox(id string, sl uint16) string { return s.names.InboxInSlot(id, sl) }

// SlotIndexes returns the indexes of the keys in slot sl (keys are in
// canonical order, so they are adjacent).
func (s *Set) SlotIndexes(sl uint16) []int {
	var out []int
	for i, k := range s.Keys {
		if k.Slot == sl {
			out = append(out, i)
		} else if k.Slot > sl {
			break
		}
	}
	return out
}

// All returns the indexes from..Len()-1.
func (s *Set) All(from int) []int {
	idx := make([]int, 0, s.Len()-from)
	for i := from; i < s.Len(); i++ {
		idx = append(idx, i)
	}
	return idx
}

// Kind says how a set entry is held (Locker.Acquire's request form).
type Kind uint8

const (
	// Exclusive: one holder; the lock key holds its value
	// (internal/lockval).
	Exclusive Kind = iota
	// Shared: any number of shared holders, no exclusive one. The lock
	// key holds lockval.Shared and, from the second holder on, the
	// holders, each with its own server-side expiry as its score, are a
	// sorted set beside it (Set.SharedKey).
	Shared
	// Permit: Units of the counted resource named by Keys[i].Name, at
	// most Limit in use at once; its hash is Set.Lock[i]
	// (slot.Namer.PermitKeyInSlot).
	Permit
)

// Entry is one entry of a request set: a key or a permit resource.
type Entry struct {
	Name         string
	Kind         Kind
	Units, Limit int64 // Permit only
}

// NewRequestSet orders a request's entries canonically: by slot, then by
// the bytes of the user key or resource name, a key before a permit of the
// same name: the order NewSet gives keys, extended. Everyone orders by the
// same rule, so the no-deadlock argument of Lock holds across kinds, and a
// key is found by its name as in a plain set (Lease looks keys up by
// binary search). Names must be distinct among keys and among permits (the
// caller has checked).
func NewRequestSet(names slot.Namer, entries []Entry) *Set {
	type item struct {
		key slot.Key
		e   Entry
	}
	items := make([]item, len(entries))
	for i, e := range entries {
		items[i] = item{slot.Key{Name: e.Name, Slot: slot.KeySlot(e.Name)}, e}
	}
	slices.SortFunc(items, func(a, b item) int {
		if c := cmp.Compare(a.key.Slot, b.key.Slot); c != 0 {
			return c
		}
		if c := strings.Compare(a.key.Name, b.key.Name); c != 0 {
			return c
		}
		return cmp.Compare(permitRank(a.e.Kind), permitRank(b.e.Kind))
	})
	s := &Set{Keys: make([]slot.Key, len(items)), Lock: make([]string, len(items)), names: names}
	plain := true
	for i, it := range items {
		s.Keys[i] = it.key
		if it.e.Kind == Permit {
			s.Lock[i] = names.PermitKeyInSlot(it.key.Name, it.key.Slot)
		} else {
			s.Lock[i] = names.LockKeyInSlot(it.key.Name, it.key.Slot)
		}
		plain = plain && it.e.Kind == Exclusive
	}
	if !plain {
		s.Kinds = make([]Entry, len(items))
		for i, it := range items {
			s.Kinds[i] = it.e
		}
	}
	return s
}

// permitRank orders a key before a permit of the same name.
func permitRank(k Kind) int {
	if k == Permit {
		return 1
	}
	return 0
}

// KindOf returns how key i is held.
func (s *Set) KindOf(i int) Kind {
	if s.Kinds == nil {
		return Exclusive
	}
	return s.Kinds[i].Kind
}

// Plain reports whether every key is exclusive (Lock, TryLock, and
// requests without shared keys or permits).
func (s *Set) Plain() bool { return s.Kinds == nil }

// HasPermits reports whether the set has permits.
func (s *Set) HasPermits() bool {
	return slices.ContainsFunc(s.Kinds, func(e Entry) bool { return e.Kind == Permit })
}

// SharedKey returns the holders sorted set of shared key i (companion in
// batch/scripts/common.lua).
func (s *Set) SharedKey(i int) string {
	return s.names.SharedKeyInSlot(s.Keys[i].Name, s.Keys[i].Slot)
}

// Split divides the indexes idx (nil: all) by kind: exclusive keys,
// shared keys, permits, each ascending.
func (s *Set) Split(idx []int) (exclusive, shared, permits []int) {
	if idx == nil {
		idx = s.All(0)
	}
	if s.Kinds == nil {
		return idx, nil, nil
	}
	for _, i := range idx {
		switch s.Kinds[i].Kind {
		case Exclusive:
			exclusive = append(exclusive, i)
		case Shared:
			shared = append(shared, i)
		default:
			permits = append(permits, i)
		}
	}
	return exclusive, shared, permits
}
