package bench

import (
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
)

// Keyspace is the number of distinct user keys, order:0 .. order:999999
// (after the environment's prefix, if any).
const Keyspace = 1_000_000

// HotKeys is the keyspace of the contended cells: every worker draws from
// the same 200 keys, so batches of 10 collide often.
const HotKeys = 200

var (
	keysMu    sync.Mutex
	orderKeys = map[string]*keyTable{}
)

// keyTable is the names of the whole keyspace, kept free of pointers: one
// string holding every name end to end and the offset where each ends. A
// []string of a million names would be a million objects that every
// garbage collection of the benchmark process marks: a forced
// runtime.GC took 11.9 ms with them and 1.3 ms with this table (best of 5,
// 2 cores, load about 6). Whichever cell a cycle lands in paid for it, and
// the contender that allocates more bytes per batch drew more cycles. Now
// a cycle marks one string.
type keyTable struct {
	all string
	end []uint32
}

// name returns key n; it shares the table's memory (no allocation).
func (t *keyTable) name(n int) string {
	start := uint32(0)
	if n > 0 {
		start = t.end[n-1]
	}
	return t.all[start:t.end[n]]
}

// keyNames returns the names of the whole keyspace under prefix, built
// once per prefix: formatting keys inside the timed loop would charge
// every contender for Sprintf.
func keyNames(prefix string) *keyTable {
	keysMu.Lock()
	defer keysMu.Unlock()
	if t, ok := orderKeys[prefix]; ok {
		return t
	}
	var b strings.Builder
	t := &keyTable{end: make([]uint32, Keyspace)}
	for i := range Keyspace {
		b.WriteString(prefix)
		b.WriteString("order:")
		b.WriteString(strconv.Itoa(i))
		t.end[i] = uint32(b.Len())
	}
	t.all = b.String()
	orderKeys[prefix] = t
	return t
}

// sampler draws batches of distinct keys from one worker's share of the
// keyspace: the keys n with n mod stride == offset, among the first size
// keys. Uncontended workers get disjoint shares, so no two of them ever
// want the same key; contended workers share the hot keys.
type sampler struct {
	rng    *rand.Rand
	names  *keyTable
	offset int
	stride int
	size   int // keys in the share
	seed   uint64

	// seen marks drawn share positions with the current generation, so a
	// draw needs no map and no clearing.
	seen []uint32
	gen  uint32

	keys []string
	idx  []int
}

func newSampler(names *keyTable, seed uint64, offset, stride, size int) *sampler {
	return &sampler{
		rng:    rand.New(rand.NewPCG(seed, samplerStream)),
		seed:   seed,
		names:  names,
		offset: offset,
		stride: stride,
		size:   size,
		seen:   make([]uint32, size),
	}
}

// samplerStream is the PCG stream of every sampler's draws, and
// otherStream that of the second run of an interleaved pair (reseed).
const samplerStream, otherStream = 0x510710c, 0x510710d

// reseed makes s draw another sequence of keys from the same share: the
// one its seed gives on otherStream.
func (s *sampler) reseed() {
	s.rng = rand.New(rand.NewPCG(s.seed, otherStream))
}

// next returns k distinct keys and their numbers (indexes into the
// keyspace). The slices are reused by the next call.
func (s *sampler) next(k int) ([]string, []int) {
	s.gen++
	s.keys, s.idx = s.keys[:0], s.idx[:0]
	// Floyd's algorithm: k distinct draws in k steps whatever k/size is.
	for j := s.size - k; j < s.size; j++ {
		t := s.rng.IntN(j + 1)
		if s.seen[t] == s.gen {
			t = j
		}
		s.seen[t] = s.gen
		n := s.offset + t*s.stride
		s.idx = append(s.idx, n)
		s.keys = append(s.keys, s.names.name(n))
	}
	// Floyd's order is not uniform: shuffle so that no contender sees
	// keys sorted by accident.
	s.rng.Shuffle(len(s.keys), func(a, b int) {
		s.keys[a], s.keys[b] = s.keys[b], s.keys[a]
		s.idx[a], s.idx[b] = s.idx[b], s.idx[a]
	})
	return s.keys, s.idx
}
