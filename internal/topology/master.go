package topology

// ShardNode is what one node entry of a CLUSTER SHARDS reply says that
// matters for choosing the node that serves the shard's slots.
type ShardNode struct {
	Role   string // "master" or "replica"
	Health string // "online", "loading" or "fail"
}

// masterRank orders the masters of one shard: an online master serves the
// slots; a loading one is still reading its data set and refuses commands
// meanwhile; a failed one is gone. An unknown health (a server or proxy
// that leaves the field out) ranks below online and above the others, so
// that a reply without health fields still maps every slot.
func masterRank(n ShardNode) int {
	if n.Role != "master" {
		return 0
	}
	switch n.Health {
	case "online":
		return 4
	case "":
		return 3
	case "loading":
		return 2
	default: // "fail"
		return 1
	}
}

// PickMaster returns the index in nodes of the master that serves the
// shard's slots, or -1 when no node has role master.
//
// A shard may list more than one master. After a failover Valkey 8 keeps
// the dead old master in the shard as `role master, health fail` beside the
// promoted replica (`role master, health online`), in either order; Redis
// 7.0 lists the old master as a replica once it is back, or as a failed
// master while it is down. Taking the last (or first) master by position
// would map the slots to a dead address whenever the server printed the
// nodes in the other order, and node-wide calls, which go to that address
// and never follow MOVED, would fail until the next refresh printed them
// the other way. So the rule is by health: online first, then unknown,
// loading and failed; the first in reply order among equals, so that every
// reader of the same reply picks the same node. The library's slot map
// (Read) and the test harness's readiness check both use this rule.
func PickMaster(nodes []ShardNode) int {
	best, bestRank := -1, 0
	for i, n := range nodes {
		if r := masterRank(n); r > bestRank {
			best, bestRank = i, r
		}
	}
	return best
}
