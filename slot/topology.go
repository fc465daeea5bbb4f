package slot

import (
	"errors"
	"fmt"
)

// ErrUncovered reports a slot no master owns: the cluster is not ready, or
// is failing over.
var ErrUncovered = errors.New("slot: slot not covered by any master")

// Map says which master owns each slot. It is plain data: the topology
// package fills it from CLUSTER SHARDS; grouping reads it. The zero Map owns
// nothing; a Map is not changed once published (a new topology is a new Map).
type Map struct {
	// Addrs lists the masters, "host:port" as the cluster announces them.
	Addrs []string
	owner [Count]int16 // index into Addrs, or -1
}

// NewMap returns a Map where no slot has an owner.
func NewMap() *Map {
	m := &Map{}
	for i := range m.owner {
		m.owner[i] = -1
	}
	return m
}

// SingleNode returns a Map where addr owns every slot: a standalone server.
func SingleNode(addr string) *Map {
	m := &Map{Addrs: []string{addr}}
	return m // owner is all zero: index 0 owns every slot
}

// Assign records that addr owns slots lo through hi inclusive.
func (m *Map) Assign(lo, hi uint16, addr string) error {
	if lo > hi || hi >= Count {
		return fmt.Errorf("slot: bad range %d-%d for %s", lo, hi, addr)
	}
	idx := -1
	for i, a := range m.Addrs {
		if a == addr {
			idx = i
			break
		}
	}
	if idx < 0 {
		idx = len(m.Addrs)
		m.Addrs = append(m.Addrs, addr)
	}
	for s := int(lo); s <= int(hi); s++ {
		m.owner[s] = int16(idx)
	}
	return nil
}

// Owner returns the index in Addrs of the master that owns slot s, or -1.
func (m *Map) Owner(s uint16) int { return int(m.owner[s&(Count-1)]) }

// Covered returns nil when every slot has an owner, else an error naming
// the first slot that has none.
func (m *Map) Covered() error {
	for s, o := range m.owner {
		if o < 0 {
			return fmt.Errorf("%w: slot %d", ErrUncovered, s)
		}
	}
	return nil
}

// ByNode is a batch of keys split by owning master. Node i's keys, still in
// canonical order, are Keys[Start[i]:Start[i+1]]; Addrs[i] names it.
type ByNode struct {
	Addrs []string
	Keys  []Key
	Start []int
}

// Node returns the keys owned by node i.
func (b *ByNode) Node(i int) []Key { return b.Keys[b.Start[i]:b.Start[i+1]] }

// Len returns the number of nodes in the split, including nodes with no keys.
func (b *ByNode) Len() int { return len(b.Start) - 1 }

// GroupByNode splits keys (in canonical order) by the master that owns each
// key's slot, keeping canonical order inside each node. It is a counting
// sort: two allocations (keys and bounds), none per key. A key whose slot has
// no owner fails the whole split with ErrUncovered naming the key.
func GroupByNode(keys []Key, m *Map) (ByNode, error) {
	n := len(m.Addrs)
	start := make([]int, n+1)
	for _, k := range keys {
		o := m.owner[k.Slot&(Count-1)]
		if o < 0 {
			return ByNode{}, fmt.Errorf("%w: slot %d of key %q", ErrUncovered, k.Slot, k.Name)
		}
		start[o+1]++
	}
	for i := 1; i <= n; i++ {
		start[i] += start[i-1]
	}
	out := make([]Key, len(keys))
	// next[i] is where node i's next key goes. Clusters have few masters, so
	// a stack array avoids a third allocation in the common case.
	var small [16]int
	var next []int
	if n > len(small) {
		next = make([]int, n)
	} else {
		next = small[:n]
	}
	copy(next, start[:n])
	for _, k := range keys {
		o := m.owner[k.Slot&(Count-1)]
		out[next[o]] = k
		next[o]++
	}
	return ByNode{Addrs: m.Addrs, Keys: out, Start: start}, nil
}
