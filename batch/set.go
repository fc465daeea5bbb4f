package batch

import (
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
}

// NewSet orders keys canonically and names their lock keys.
func NewSet(names slot.Namer, keys []string) *Set {
	ks := slot.Sorted(keys)
	lk := make([]string, len(ks))
	for i, k := range ks {
		lk[i] = names.LockKeyInSlot(k.Name, k.Slot)
	}
	return &Set{Keys: ks, Lock: lk}
}

// Len returns the number of distinct keys.
func (s *Set) Len() int { return len(s.Keys) }

// slotKey returns the key named suffix in lock key P{T}:K's slot: P{T}+suffix
// (the prefix has no braces, so the first '}' closes the slot tag). It is
// the Go twin of slot_key in common.lua.
func slotKey(lock, suffix string) string {
	b := strings.IndexByte(lock, '}')
	return lock[:b+1] + suffix
}

// holdKey returns the hold set of lock key P{T}:K: P{T}#n:K, the Go twin of
// hold_key in reentrant/hold.lua.
func holdKey(lock string) string {
	b := strings.IndexByte(lock, '}')
	return lock[:b+1] + "#n" + lock[b+1:]
}
