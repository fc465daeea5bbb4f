package batch

import (
	"github.com/slotlock/slotlock/slot"
)

// Set is the fixed key set of one lease: the user keys in canonical order
// (slot, then bytes; duplicates removed) and, at the same index, the lock key
// that stands for each of them. Every attempt, extension and release of the
// lease works on indexes into a Set.
type Set struct {
	Keys  []slot.Key
	Lock  []string
	names slot.Namer
}

// NewSet orders keys canonically and names their lock keys.
func NewSet(names slot.Namer, keys []string) *Set {
	ks := slot.Sorted(keys)
	return &Set{Keys: ks, Lock: names.LockKeys(ks), names: names}
}

// Len returns the number of distinct keys.
func (s *Set) Len() int { return len(s.Keys) }

// fenceKey returns the fencing counter of key i's slot (slot_key(k,
// '#fence') in common.lua).
func (s *Set) fenceKey(i int) string { return s.names.FenceKey(s.Keys[i].Slot) }

// holdKey returns the hold set of key i (hold_key in reentrant/hold.lua).
func (s *Set) holdKey(i int) string {
	return s.names.HoldCountKeyInSlot(s.Keys[i].Name, s.Keys[i].Slot)
}
