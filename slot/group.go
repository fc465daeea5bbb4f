package slot

import (
	"cmp"
	"slices"
	"strings"
)

// Key is a user key with its hash slot.
type Key struct {
	Name string
	Slot uint16
}

// compareKeys is the canonical order of keys: by slot, then by bytes. Every
// batch is acquired in this order, which is what keeps overlapping batches
// from deadlocking: two batches that wait for each other would each have to
// hold a key the other one wants BELOW the key it waits for, and the order
// is total, so no cycle can form. The order does not depend on the topology,
// so it survives resharding and failover.
func compareKeys(a, b Key) int {
	if c := cmp.Compare(a.Slot, b.Slot); c != 0 {
		return c
	}
	return strings.Compare(a.Name, b.Name)
}

// Less reports whether a comes before b in canonical order.
func Less(a, b Key) bool { return compareKeys(a, b) < 0 }

// Sorted returns keys with their slots in canonical order (slot, then bytes),
// duplicates removed. It orders packed (slot, index) integers rather than
// strings: only keys that share a slot are compared as strings, which is
// three times faster at 1,000 keys than sorting by string comparison.
// From radixMin keys on, the integers are ordered by a radix sort on the
// slot (two passes of 7 bits: slots have 14) instead of a comparison sort:
// at K = 1,000 the comparison sort was 9% of the client's CPU per batch
// (docs/benchmarks.md). Two allocations: the result and a scratch slice
// of integers.
func Sorted(keys []string) []Key {
	n := len(keys)
	var packed []uint64
	if n >= radixMin {
		packed = make([]uint64, 2*n) // the second half: the radix sort's scratch
	} else {
		packed = make([]uint64, n)
	}
	for i, k := range keys {
		packed[i] = uint64(KeySlot(k))<<32 | uint64(i)
	}
	if n >= radixMin {
		radixBySlot(packed[:n], packed[n:])
		packed = packed[:n]
	} else {
		slices.Sort(packed)
	}
	out := make([]Key, n)
	for i, p := range packed {
		out[i] = Key{Name: keys[uint32(p)], Slot: uint16(p >> 32)}
	}
	// Keys that share a slot are adjacent now; order each such run by
	// bytes and drop its duplicates (only keys of one slot can be equal).
	w := 0
	for i := 0; i < n; {
		j := i + 1
		for j < n && out[j].Slot == out[i].Slot {
			j++
		}
		run := out[i:j]
		if len(run) > 1 {
			slices.SortFunc(run, compareKeys)
			run = slices.CompactFunc(run, func(a, b Key) bool { return a.Name == b.Name })
		}
		if w != i { // only after a duplicate: copying pointers costs write barriers
			copy(out[w:], run)
		}
		w += len(run)
		i = j
	}
	clear(out[w:]) // no stale names kept alive past the result's length
	return out[:w]
}

// radixMin is the number of keys from which Sorted orders by radix: below
// it the comparison sort (insertion sort up to 12 elements) does fewer
// steps than the radix sort's two passes over 128 buckets.
const radixMin = 64

// radixBySlot orders packed (slot<<32 | index) integers by slot, stably
// (an LSD radix sort: the low 7 bits of the slot, then the high 7), using
// tmp (as long as packed) as scratch. Indexes of one slot stay in the
// order they had.
func radixBySlot(packed, tmp []uint64) {
	var lo, hi [128]int
	for _, p := range packed {
		lo[(p>>32)&127]++
		hi[(p>>39)&127]++
	}
	for _, c := range [2]*[128]int{&lo, &hi} {
		sum := 0
		for b, k := range c {
			c[b] = sum
			sum += k
		}
	}
	for _, p := range packed {
		b := (p >> 32) & 127
		tmp[lo[b]] = p
		lo[b]++
	}
	for _, p := range tmp {
		b := (p >> 39) & 127
		packed[hi[b]] = p
		hi[b]++
	}
}

// SlotRuns calls fn for each run of keys (in canonical order) that share a
// slot, with the run as a sub-slice of keys: no copy, no allocation.
func SlotRuns(keys []Key, fn func(slot uint16, run []Key) bool) {
	for i := 0; i < len(keys); {
		j := i + 1
		for j < len(keys) && keys[j].Slot == keys[i].Slot {
			j++
		}
		if !fn(keys[i].Slot, keys[i:j]) {
			return
		}
		i = j
	}
}
