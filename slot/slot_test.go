package slot

import (
	"crypto/sha256"
	"encoding/hex"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestCRC16Vector(t *testing.T) {
	// The check value of CRC16-XMODEM, also quoted in the Redis Cluster spec.
	assert.Equal(t, uint16(0x31C3), CRC16([]byte("123456789")))
	assert.Equal(t, uint16(0), CRC16(nil))
}

func TestKeySlotVectors(t *testing.T) {
	tests := []struct {
		key  string
		want uint16
	}{
		{"foo", 12182},
		{"123456789", 0x31C3 % Count},
		{"", 0},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, KeySlot(tt.key), "KeySlot(%q)", tt.key)
		assert.Equal(t, tt.want, KeySlotBytes([]byte(tt.key)), "KeySlotBytes(%q)", tt.key)
	}
}

func TestHashTagRules(t *testing.T) {
	tests := []struct{ key, hashed string }{
		{"{user1000}.following", "user1000"},
		{"{user1000}.followers", "user1000"},
		{"foo{}{bar}", "foo{}{bar}"}, // first tag empty: whole key
		{"foo{{bar}}zap", "{bar"},    // first '{', then first '}' after it
		{"foo{bar}{zap}", "bar"},     // only the first tag counts
		{"{}", "{}"},
		{"{", "{"},
		{"}{", "}{"},
		{"a{b", "a{b"},
		{"a}b{c}", "c"},
		{"{a}", "a"},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.hashed, HashTag(tt.key), "HashTag(%q)", tt.key)
		assert.Equal(t, KeySlot(tt.hashed), KeySlot(tt.key), "KeySlot(%q)", tt.key)
		assert.Equal(t, crc16String(tt.hashed)%Count, KeySlotBytes([]byte(tt.key)), "KeySlotBytes(%q)", tt.key)
	}
	assert.Equal(t, KeySlot("{user1000}.following"), KeySlot("{user1000}.followers"))
	assert.NotEqual(t, KeySlot("foo{}{bar}"), KeySlot("bar"))
}

func TestTagCoversEverySlot(t *testing.T) {
	seen := make(map[string]bool, Count)
	for s := range uint16(Count) {
		tag := Tag(s)
		require.NotEmpty(t, tag, "slot %d has no tag", s)
		require.LessOrEqual(t, len(tag), 3)
		require.False(t, strings.ContainsAny(tag, "{}"), "tag %q has a brace", tag)
		require.Equal(t, s, KeySlot(tag), "tag %q", tag)
		require.False(t, seen[tag], "tag %q used twice", tag)
		seen[tag] = true
	}
}

// The tags are part of every lock key's name: Lockers of two versions
// must name a key alike, or both could hold it. This digest of the whole
// table was taken before its storage changed (one packed string instead
// of 16,384 strings) and must never move.
func TestTagTableIsFixed(t *testing.T) {
	h := sha256.New()
	for s := range uint16(Count) {
		h.Write([]byte(Tag(s) + ","))
	}
	require.Equal(t, "68b9cfbb879e8714d9aa7c9467d43b9e770d09e314cbaf662d70adbad037ebc6", hex.EncodeToString(h.Sum(nil)))
	require.Equal(t, []string{"06S", "0or", "6ZJ"}, []string{Tag(0), Tag(100), Tag(16383)})
}

// randomKey makes keys that stress the hash-tag rule: random bytes, many
// braces, empty tags, unicode and, now and then, long keys.
func randomKey(r *rand.Rand) string {
	var b []byte
	n := r.IntN(24)
	if r.IntN(200) == 0 {
		n = 1000 + r.IntN(5000)
	}
	for range n {
		switch r.IntN(10) {
		case 0:
			b = append(b, '{')
		case 1:
			b = append(b, '}')
		case 2:
			b = utf8.AppendRune(b, rune(0x80+r.IntN(0x3000)))
		case 3:
			b = append(b, byte(r.IntN(256)))
		default:
			b = append(b, "abcxyz:0123456789"[r.IntN(17)])
		}
	}
	return string(b)
}

func TestLockKeyColocatedAndInjective(t *testing.T) {
	n, err := NewNamer("")
	require.NoError(t, err)
	r := rand.New(rand.NewPCG(1, 2))
	lockKeys := make(map[string]string)
	for range 100_000 {
		k := randomKey(r)
		lk := n.LockKey(k)
		require.Equal(t, KeySlot(k), KeySlot(lk), "lock key %q of %q", lk, k)
		require.Equal(t, KeySlot(k), KeySlot(n.HoldCountKey(k)))
		require.Equal(t, KeySlot(k), KeySlot(n.FenceKey(KeySlot(k))))
		back, ok := n.UserKey(lk)
		require.True(t, ok)
		require.Equal(t, k, back)
		if prev, dup := lockKeys[lk]; dup {
			require.Equal(t, prev, k, "two user keys share lock key %q", lk)
		}
		lockKeys[lk] = k
		require.NotEqual(t, lk, n.FenceKey(KeySlot(k)))
		require.NotEqual(t, lk, n.HoldCountKey(k))
		// The scripts derive the counter and hold set from the lock key
		// P{T}:K (slot_key and companion in common.lua), the Go
		// side from the Namer: the names must agree, or a per-slot call
		// declares keys other than the ones its script touches.
		b := strings.IndexByte(lk, '}')
		require.Equal(t, lk[:b+1]+"#fence", n.FenceKey(KeySlot(k)))
		require.Equal(t, lk[:b+1]+"#n"+lk[b+1:], n.HoldCountKeyInSlot(k, KeySlot(k)))
	}
}

// LockKeys names a whole batch at once (one backing string); every name
// must be exactly the one LockKey gives, whatever the keys' lengths.
func TestLockKeysAgreeWithLockKey(t *testing.T) {
	n, err := NewNamer("p")
	require.NoError(t, err)
	r := rand.New(rand.NewPCG(3, 4))
	require.Empty(t, n.LockKeys(nil))
	for size := range 300 {
		keys := make([]string, size)
		for i := range keys {
			keys[i] = randomKey(r)
		}
		ks := Sorted(keys)
		got := n.LockKeys(ks)
		require.Len(t, got, len(ks))
		for i, k := range ks {
			require.Equal(t, n.LockKey(k.Name), got[i], "key %d of %d", i, len(ks))
		}
	}
}

func TestNamerPrefix(t *testing.T) {
	_, err := NewNamer("a{b")
	require.ErrorIs(t, err, ErrBadPrefix)
	_, err = NewNamer("a}b")
	require.ErrorIs(t, err, ErrBadPrefix)
	a, err := NewNamer("app1")
	require.NoError(t, err)
	b, err := NewNamer("app2")
	require.NoError(t, err)
	assert.NotEqual(t, a.LockKey("x"), b.LockKey("x"))
	assert.True(t, strings.HasPrefix(a.LockKey("x"), "app1{"))
	_, ok := b.UserKey(a.LockKey("x"))
	assert.False(t, ok, "a lock key of another prefix is not ours")
	_, ok = a.UserKey(a.FenceKey(3))
	assert.False(t, ok, "a fence key is not a lock key")
}

// Sorted against the definition of canonical order, on both sides of
// radixMin (the radix sort by slot, and the comparison sort below it):
// batches with duplicates, keys sharing a slot (hash tags) and slots over
// the whole range, so that both radix passes matter.
func TestSortedMatchesDefinition(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for size := range 2 * radixMin * 3 {
		keys := make([]string, size)
		for i := range keys {
			switch r.IntN(4) {
			case 0: // a repeat of an earlier key
				if i > 0 {
					keys[i] = keys[r.IntN(i)]
					continue
				}
				keys[i] = randomKey(r)
			case 1: // one of a few slots
				keys[i] = "{t" + string(rune('a'+r.IntN(3))) + "}" + randomKey(r)
			default:
				keys[i] = randomKey(r)
			}
		}
		want := make([]Key, len(keys))
		for i, k := range keys {
			want[i] = Key{Name: k, Slot: KeySlot(k)}
		}
		slices.SortFunc(want, compareKeys)
		want = slices.Compact(want)
		got := Sorted(keys)
		if len(want) == 0 {
			require.Empty(t, got, "size %d", size)
			continue
		}
		require.Equal(t, want, got, "size %d", size)
	}
}

func TestSortedCanonical(t *testing.T) {
	keys := []string{"b", "a", "{x}2", "{x}1", "a", "c", "b"}
	got := Sorted(keys)
	require.Len(t, got, 5)
	for i := 1; i < len(got); i++ {
		require.True(t, Less(got[i-1], got[i]), "%v before %v", got[i-1], got[i])
	}
	// The same set in another order gives the same sequence.
	assert.Equal(t, got, Sorted([]string{"c", "{x}1", "b", "{x}2", "a"}))
	var slots []uint16
	SlotRuns(got, func(s uint16, run []Key) bool {
		slots = append(slots, s)
		for _, k := range run {
			require.Equal(t, s, k.Slot)
		}
		return true
	})
	distinct := map[uint16]bool{}
	for _, k := range got {
		distinct[k.Slot] = true
	}
	assert.Len(t, slots, len(distinct), "one run per slot")
}

func TestGroupByNode(t *testing.T) {
	m := NewMap()
	require.ErrorIs(t, m.Covered(), ErrUncovered)
	require.NoError(t, m.Assign(0, 5460, "n0"))
	require.NoError(t, m.Assign(5461, 10922, "n1"))
	require.NoError(t, m.Assign(10923, 16383, "n2"))
	require.NoError(t, m.Assign(100, 100, "n2")) // a resharded slot
	require.NoError(t, m.Covered())
	require.Error(t, m.Assign(5, 4, "n0"))

	r := rand.New(rand.NewPCG(3, 4))
	keys := make([]string, 1000)
	for i := range keys {
		keys[i] = randomKey(r)
	}
	keys = append(keys, "{"+Tag(100)+"}moved")
	sorted := Sorted(keys)
	g, err := GroupByNode(sorted, m)
	require.NoError(t, err)
	require.Equal(t, 3, g.Len())
	total := 0
	for i := range g.Len() {
		nk := g.Node(i)
		total += len(nk)
		for j, k := range nk {
			require.Equal(t, i, m.Owner(k.Slot))
			if j > 0 {
				require.True(t, Less(nk[j-1], k))
			}
		}
	}
	require.Equal(t, len(sorted), total)
	moved := Key{Name: "{" + Tag(100) + "}moved", Slot: 100}
	require.Contains(t, g.Node(2), moved)

	hole := NewMap()
	require.NoError(t, hole.Assign(0, 16000, "n0"))
	_, err = GroupByNode([]Key{{Name: "k", Slot: 16001}}, hole)
	require.ErrorIs(t, err, ErrUncovered)
	require.ErrorContains(t, err, `"k"`)

	single := SingleNode("solo")
	g, err = GroupByNode(sorted, single)
	require.NoError(t, err)
	require.Equal(t, sorted, g.Node(0))
}

func FuzzKeySlot(f *testing.F) {
	for _, s := range []string{"foo", "{a}b", "foo{}{bar}", "foo{{bar}}zap", "{", "}", ""} {
		f.Add([]byte(s))
	}
	n, _ := NewNamer("")
	f.Fuzz(func(t *testing.T, key []byte) {
		s := KeySlot(string(key))
		if s != KeySlotBytes(key) {
			t.Fatalf("KeySlot and KeySlotBytes disagree on %q", key)
		}
		if want := referenceSlot(key); s != want {
			t.Fatalf("KeySlot(%q) = %d, reference says %d", key, s, want)
		}
		if got := KeySlot(n.LockKey(string(key))); got != s {
			t.Fatalf("lock key of %q lands in slot %d, not %d", key, got, s)
		}
	})
}

// referenceSlot is a direct transcription of keyHashSlot from Redis's
// cluster.c, with a bitwise CRC instead of the table, so the fuzzer compares
// two independent implementations.
func referenceSlot(key []byte) uint16 {
	crc := func(b []byte) uint16 {
		var c uint16
		for _, x := range b {
			c ^= uint16(x) << 8
			for range 8 {
				if c&0x8000 != 0 {
					c = c<<1 ^ 0x1021
				} else {
					c <<= 1
				}
			}
		}
		return c
	}
	var s int
	for s = 0; s < len(key); s++ {
		if key[s] == '{' {
			break
		}
	}
	if s == len(key) {
		return crc(key) & 0x3FFF
	}
	var e int
	for e = s + 1; e < len(key); e++ {
		if key[e] == '}' {
			break
		}
	}
	if e == len(key) || e == s+1 {
		return crc(key) & 0x3FFF
	}
	return crc(key[s+1:e]) & 0x3FFF
}
