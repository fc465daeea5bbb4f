package topology

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

// recordedShards reads a CLUSTER SHARDS reply recorded from a real server
// with `redis-cli -3 --json -p PORT CLUSTER SHARDS` and turns it into what
// decodeShards makes of the same reply.
func recordedShards(t *testing.T, name string) []shard {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", name))
	require.NoError(t, err)
	var reply []struct {
		Slots []int64 `json:"slots"`
		Nodes []struct {
			Endpoint string `json:"endpoint"`
			Port     int    `json:"port"`
			Role     string `json:"role"`
			Health   string `json:"health"`
		} `json:"nodes"`
	}
	require.NoError(t, json.Unmarshal(raw, &reply))
	out := make([]shard, len(reply))
	for i, r := range reply {
		out[i].ranges = r.Slots
		for _, n := range r.Nodes {
			out[i].nodes = append(out[i].nodes, ShardNode{Role: n.Role, Health: n.Health})
			out[i].addrs = append(out[i].addrs, net.JoinHostPort(n.Endpoint, strconv.Itoa(n.Port)))
		}
	}
	return out
}

// reversed returns shards with the nodes of every shard in the opposite
// order: the same cluster state as printed by a server that lists the
// shard's nodes the other way round.
func reversed(shards []shard) []shard {
	out := make([]shard, len(shards))
	for i, s := range shards {
		out[i] = shard{ranges: s.ranges, nodes: slices.Clone(s.nodes), addrs: slices.Clone(s.addrs)}
		slices.Reverse(out[i].nodes)
		slices.Reverse(out[i].addrs)
	}
	return out
}

// TestSlotMapAfterFailover maps the slots of replies recorded right after a
// master of a 3+3 cluster was SIGKILLed and its replica promoted, in the
// order the server printed them and reversed. Valkey 8.0.1 lists the dead
// master in the shard beside the promoted one, both with role master (the
// dead one with health fail); Redis 7.0.15 lists it as a shard of its own
// without slots. Either way, and in either order, the slots of the failed
// master belong to the promoted node (port 31195 and 26273 in the
// recordings), never to the dead address.
func TestSlotMapAfterFailover(t *testing.T) {
	for _, tc := range []struct {
		file, dead, promoted string
	}{
		{"shards-valkey-8.0.1-after-failover.json", "127.0.0.1:23923", "127.0.0.1:31195"},
		{"shards-redis-7.0.15-after-failover.json", "127.0.0.1:31828", "127.0.0.1:26273"},
	} {
		recorded := recordedShards(t, tc.file)
		for _, order := range []struct {
			name   string
			shards []shard
		}{{"as recorded", recorded}, {"nodes reversed", reversed(recorded)}} {
			t.Run(fmt.Sprintf("%s/%s", tc.file, order.name), func(t *testing.T) {
				m, err := mapFromShards(order.shards)
				require.NoError(t, err)
				require.NotContains(t, m.Addrs, tc.dead, "a failed master owns no slot")
				for _, s := range []uint16{0, 1, 2000, 5460} {
					require.Equal(t, tc.promoted, m.Addrs[m.Owner(s)], "slot %d", s)
				}
				require.Len(t, m.Addrs, 3)
			})
		}
	}
}

// TestSlotMapAfterFailoverRedis74 reads a reply recorded the same way
// from Redis 7.4.1, which takes a shard's "slots" from the master of the
// shard's first node: the failed old master, listed first, owns nothing
// now, so the promoted master's slots (0-5460) appear in no shard. The map
// must then be refused as incomplete, so that Read falls back to CLUSTER
// SLOTS, rather than leave slots without an owner or give them to the dead
// node.
func TestSlotMapAfterFailoverRedis74(t *testing.T) {
	recorded := recordedShards(t, "shards-redis-7.4.1-after-failover.json")
	for _, shards := range [][]shard{recorded, reversed(recorded)} {
		_, err := mapFromShards(shards)
		require.Error(t, err)
	}
}

func TestPickMaster(t *testing.T) {
	master := func(h string) ShardNode { return ShardNode{Role: "master", Health: h} }
	replica := ShardNode{Role: "replica", Health: "online"}
	for _, tc := range []struct {
		name  string
		nodes []ShardNode
		want  int
	}{
		{"one master", []ShardNode{master("online"), replica}, 0},
		{"replica first", []ShardNode{replica, master("online")}, 1},
		{"failed then online", []ShardNode{master("fail"), master("online")}, 1},
		{"online then failed", []ShardNode{master("online"), master("fail")}, 0},
		{"loading then online", []ShardNode{master("loading"), master("online")}, 1},
		{"online then loading", []ShardNode{master("online"), master("loading")}, 0},
		{"no health field beats a failed master", []ShardNode{master("fail"), master("")}, 1},
		{"online beats no health field", []ShardNode{master(""), master("online")}, 1},
		{"loading beats failed", []ShardNode{master("fail"), master("loading")}, 1},
		{"only a failed master: still the owner", []ShardNode{master("fail"), replica}, 0},
		{"first among equals", []ShardNode{master("online"), master("online")}, 0},
		{"no master", []ShardNode{replica, replica}, -1},
		{"empty", nil, -1},
	} {
		require.Equal(t, tc.want, PickMaster(tc.nodes), tc.name)
	}
}
