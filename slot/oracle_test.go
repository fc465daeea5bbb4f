package slot_test

import (
	"context"
	"math/rand/v2"
	"os"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/slotlock/slotlock/internal/redistest"
	"github.com/slotlock/slotlock/internal/topology"
	"github.com/slotlock/slotlock/slot"
)

var cluster *redistest.Cluster

func TestMain(m *testing.M) { os.Exit(redistest.Main(m, redistest.Options{}, &cluster)) }

// oracleKey makes keys that stress the hash-tag rule: random bytes, many
// braces, empty tags, unicode and, now and then, long keys.
func oracleKey(r *rand.Rand) string {
	var b []byte
	n := r.IntN(24)
	if r.IntN(500) == 0 {
		n = 1000 + r.IntN(20000)
	}
	for range n {
		switch r.IntN(8) {
		case 0:
			b = append(b, '{')
		case 1:
			b = append(b, '}')
		case 2:
			b = utf8.AppendRune(b, rune(0x80+r.IntN(0x10000)))
		case 3:
			b = append(b, byte(r.IntN(256)))
		default:
			b = append(b, "abc:012"[r.IntN(7)])
		}
	}
	return string(b)
}

// askServer returns CLUSTER KEYSLOT of every key, asked of one node in
// pipelines of 1,000.
func askServer(t *testing.T, ctx context.Context, n rueidis.Client, keys []string) []int64 {
	t.Helper()
	out := make([]int64, 0, len(keys))
	for start := 0; start < len(keys); start += 1000 {
		end := min(start+1000, len(keys))
		cmds := make(rueidis.Commands, 0, end-start)
		for _, k := range keys[start:end] {
			cmds = append(cmds, n.B().Arbitrary("CLUSTER", "KEYSLOT").Args(k).Build())
		}
		for i, r := range n.DoMulti(ctx, cmds...) {
			v, err := r.AsInt64()
			require.NoError(t, err, "CLUSTER KEYSLOT %q", keys[start+i])
			out = append(out, v)
		}
	}
	return out
}

// TestKeySlotAgreesWithServer is the oracle: 100,000 generated keys, each
// hashed by KeySlot and by the server's CLUSTER KEYSLOT. The lock key of
// every one of them must land in the same slot on the server too.
func TestKeySlotAgreesWithServer(t *testing.T) {
	c := redistest.Require(t, cluster)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	n, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{c.Nodes()[0].Addr()}, ForceSingleClient: true})
	require.NoError(t, err)
	defer n.Close()
	names, err := slot.NewNamer("")
	require.NoError(t, err)

	r := rand.New(rand.NewPCG(2026, 11))
	keys := make([]string, 100_000)
	for i := range keys {
		keys[i] = oracleKey(r)
	}
	keys = append(keys, "123456789", "foo", "{user1000}.following", "{user1000}.followers",
		"foo{}{bar}", "foo{{bar}}zap", "foo{bar}{zap}", "{}", "{", "}", "")
	server := askServer(t, ctx, n, keys)
	for i, k := range keys {
		require.Equal(t, server[i], int64(slot.KeySlot(k)), "key %q", k)
	}

	lockKeys := make([]string, 0, 20_000)
	for _, k := range keys[:20_000] {
		lockKeys = append(lockKeys, names.LockKey(k))
	}
	lockSlots := askServer(t, ctx, n, lockKeys)
	for i, lk := range lockKeys {
		require.Equal(t, server[i], lockSlots[i], "lock key %q of %q", lk, keys[i])
	}
	// Every tag in the table hashes, on the server, to its slot.
	tags := make([]string, slot.Count)
	for s := range tags {
		tags[s] = "{" + slot.Tag(uint16(s)) + "}"
	}
	for s, got := range askServer(t, ctx, n, tags) {
		require.Equal(t, int64(s), got, "tag of slot %d", s)
	}
}

// TestGroupByNodeMatchesServer reads the live slot map (CLUSTER SHARDS),
// groups keys by node with it, and checks that each group's master really
// serves every key of it: a GET sent to exactly that node is not redirected.
func TestGroupByNodeMatchesServer(t *testing.T) {
	c := redistest.Require(t, cluster)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	client, err := c.Client()
	require.NoError(t, err)
	defer client.Close()

	m, err := topology.Read(ctx, client)
	require.NoError(t, err)
	require.Len(t, m.Addrs, 3)
	r := rand.New(rand.NewPCG(1, 1))
	raw := make([]string, 1000)
	for i := range raw {
		raw[i] = oracleKey(r)
	}
	g, err := slot.GroupByNode(slot.Sorted(raw), m)
	require.NoError(t, err)
	byAddr := map[string]*redistest.Node{}
	for _, n := range c.Nodes() {
		byAddr[n.Addr()] = n
	}
	total := 0
	for i := range g.Len() {
		node := byAddr[g.Addrs[i]]
		require.NotNil(t, node, "no node at %s", g.Addrs[i])
		for _, k := range g.Node(i) {
			err := node.Do(ctx, "GET", k.Name).Error()
			require.True(t, err == nil || rueidis.IsRedisNil(err), "key %q on %s: %v", k.Name, node.Addr(), err)
			total++
		}
	}
	require.Equal(t, len(slot.Sorted(raw)), total)
}
