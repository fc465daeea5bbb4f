package protocol

import "github.com/slotlock/slotlock/slot"

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

// FenceKey returns the fencing counter of key i's slot (slot_key(k,
// '#fence') in batch/scripts/common.lua).
func (s *Set) FenceKey(i int) string { return s.names.FenceKey(s.Keys[i].Slot) }

// HoldKey returns the hold set of key i (hold_key in reentrant/hold.lua).
func (s *Set) HoldKey(i int) string {
	return s.names.HoldCountKeyInSlot(s.Keys[i].Name, s.Keys[i].Slot)
}

// QueueKeys returns the queue keys of key i (queue_keys in
// batch/scripts/common.lua).
func (s *Set) QueueKeys(i int) (order, deadlines string) {
	return s.names.QueueKeysInSlot(s.Keys[i].Name, s.Keys[i].Slot)
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
