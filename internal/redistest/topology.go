package redistest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/redis/rueidis"

	"github.com/slotlock/slotlock/internal/topology"
)

// numSlots is the fixed number of hash slots of Redis Cluster.
const numSlots = 16384

// shard is one entry of CLUSTER SHARDS: a slot set and the nodes serving it.
type shard struct {
	ranges [][2]int
	nodes  []shardNode
}

type shardNode struct {
	id     string
	port   int
	role   string // "master" or "replica"
	health string // "online", "loading" or "fail"
}

func (s shard) slotCount() int {
	n := 0
	for _, r := range s.ranges {
		n += r[1] - r[0] + 1
	}
	return n
}

func (s shard) owns(slot int) bool {
	for _, r := range s.ranges {
		if slot >= r[0] && slot <= r[1] {
			return true
		}
	}
	return false
}

// master is the node that serves the shard's slots as this view sees it,
// chosen by the library's own rule (topology.PickMaster: role, then health),
// so that the harness waits for exactly the master the library will use.
// A shard may list two masters: Valkey keeps a failed old master beside the
// promoted replica. Redis 7.0 can list a shard whose only node is a replica
// right after a REPLICATE: no master then.
func (s shard) master() (shardNode, bool) {
	nodes := make([]topology.ShardNode, len(s.nodes))
	for i, n := range s.nodes {
		nodes[i] = topology.ShardNode{Role: n.role, Health: n.health}
	}
	if i := topology.PickMaster(nodes); i >= 0 {
		return s.nodes[i], true
	}
	return shardNode{}, false
}

// parseShards reads a CLUSTER SHARDS reply, RESP3 maps or RESP2 pair lists.
func parseShards(res rueidis.RedisResult) ([]shard, error) {
	arr, err := res.ToArray()
	if err != nil {
		return nil, err
	}
	out := make([]shard, 0, len(arr))
	for _, e := range arr {
		m, err := e.AsMap()
		if err != nil {
			return nil, fmt.Errorf("CLUSTER SHARDS entry: %w", err)
		}
		var s shard
		slotsMsg, nodesMsg := m["slots"], m["nodes"]
		bounds, err := slotsMsg.AsIntSlice()
		if err != nil {
			return nil, fmt.Errorf("CLUSTER SHARDS slots: %w", err)
		}
		for i := 0; i+1 < len(bounds); i += 2 {
			s.ranges = append(s.ranges, [2]int{int(bounds[i]), int(bounds[i+1])})
		}
		nodes, err := nodesMsg.ToArray()
		if err != nil {
			return nil, fmt.Errorf("CLUSTER SHARDS nodes: %w", err)
		}
		for _, nm := range nodes {
			fields, err := nm.AsMap()
			if err != nil {
				return nil, fmt.Errorf("CLUSTER SHARDS node: %w", err)
			}
			var n shardNode
			n.id, _ = readString(fields["id"])
			n.role, _ = readString(fields["role"])
			n.health, _ = readString(fields["health"])
			port := fields["port"]
			if p, err := port.AsInt64(); err == nil {
				n.port = int(p)
			}
			s.nodes = append(s.nodes, n)
		}
		out = append(out, s)
	}
	return out, nil
}

func readString(m rueidis.RedisMessage) (string, error) { return m.ToString() }

// slotOwners reads a CLUSTER SLOTS reply into the slot ranges each master
// (by node ID) serves.
func slotOwners(res rueidis.RedisResult) (map[string][][2]int, error) {
	arr, err := res.ToArray()
	if err != nil {
		return nil, err
	}
	out := map[string][][2]int{}
	for _, e := range arr {
		f, err := e.ToArray()
		if err != nil || len(f) < 3 {
			return nil, fmt.Errorf("CLUSTER SLOTS entry: %v", err)
		}
		lo, _ := f[0].AsInt64()
		hi, _ := f[1].AsInt64()
		master, err := f[2].ToArray()
		if err != nil || len(master) < 3 {
			return nil, fmt.Errorf("CLUSTER SLOTS master: %v", err)
		}
		id, _ := master[2].ToString()
		out[id] = append(out[id], [2]int{int(lo), int(hi)})
	}
	return out, nil
}

// withSlotsFromSlots gives a shard that CLUSTER SHARDS lists without slots
// the ranges CLUSTER SLOTS says its master serves. Redis 7.4 (seen on
// 7.4.1) reports as a shard's slots those of the master of the shard's
// FIRST node; after a failover that can be the failed old master, listed
// first beside the promoted one and owning nothing any more, so the
// promoted master's slots appear in no shard at all, and the cluster would
// never look ready. (The library's slot map falls back to CLUSTER SLOTS
// when CLUSTER SHARDS leaves slots uncovered, to the same effect.) A shard
// that does list slots is left as the server said.
func withSlotsFromSlots(shards []shard, owners map[string][][2]int) {
	for i := range shards {
		if shards[i].slotCount() > 0 {
			continue
		}
		if m, ok := shards[i].master(); ok {
			shards[i].ranges = owners[m.id]
		}
	}
}

// slotsSignature condenses a CLUSTER SLOTS reply to "range master replicas"
// lines in slot order, so that the views of two nodes compare as strings.
func slotsSignature(res rueidis.RedisResult) (string, error) {
	arr, err := res.ToArray()
	if err != nil {
		return "", err
	}
	lines := make([]string, 0, len(arr))
	for _, e := range arr {
		f, err := e.ToArray()
		if err != nil || len(f) < 3 {
			return "", fmt.Errorf("CLUSTER SLOTS entry: %v", err)
		}
		lo, _ := f[0].AsInt64()
		hi, _ := f[1].AsInt64()
		var ids []string
		for _, n := range f[2:] {
			nf, err := n.ToArray()
			if err != nil || len(nf) < 3 {
				return "", fmt.Errorf("CLUSTER SLOTS node: %v", err)
			}
			id, _ := nf[2].ToString()
			ids = append(ids, id)
		}
		slices.Sort(ids[1:])
		lines = append(lines, fmt.Sprintf("%05d-%05d %s", lo, hi, strings.Join(ids, ",")))
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n"), nil
}

// view returns the shard map as one running node sees it: the first that
// answers, in start-up order.
func (c *Cluster) view(ctx context.Context) ([]shard, error) {
	if c.standalone {
		return nil, errors.New("redistest: a standalone server has no cluster topology")
	}
	var errs []error
	for _, n := range c.liveNodes() {
		res := n.doMulti(ctx, []string{"CLUSTER", "SHARDS"}, []string{"CLUSTER", "SLOTS"})
		sh, err := parseShards(res[0])
		if err == nil {
			var owners map[string][][2]int
			if owners, err = slotOwners(res[1]); err == nil {
				withSlotsFromSlots(sh, owners)
				return sh, nil
			}
		}
		errs = append(errs, fmt.Errorf("CLUSTER SHARDS and SLOTS on %s: %w", n.Addr(), err))
		if ctx.Err() != nil {
			break
		}
	}
	if len(errs) == 0 {
		return nil, errors.New("redistest: no node is running")
	}
	return nil, fmt.Errorf("redistest: no node answered: %w", errors.Join(errs...))
}

func (c *Cluster) nodeByID(id string) *Node {
	for _, n := range c.nodes {
		if n.id == id {
			return n
		}
	}
	return nil
}

// Masters returns the masters that own slots now, in slot order, read from
// the live topology (CLUSTER SHARDS of a running node, confirmed by each
// master's own ROLE), because failovers move the role between nodes. Call
// WaitReady first if the cluster may still be moving.
func (c *Cluster) Masters(ctx context.Context) ([]*Node, error) {
	if c.standalone {
		return c.Nodes(), nil
	}
	shards, err := c.view(ctx)
	if err != nil {
		return nil, err
	}
	slices.SortFunc(shards, func(a, b shard) int { return firstSlot(a) - firstSlot(b) })
	var out []*Node
	for _, s := range shards {
		if s.slotCount() == 0 {
			continue
		}
		sn, ok := s.master()
		if !ok {
			return nil, fmt.Errorf("redistest: shard with slots %v has no master", s.ranges)
		}
		n := c.nodeByID(sn.id)
		if n == nil || n.getState() != nodeUp || sn.health == "fail" {
			return nil, fmt.Errorf("redistest: master of slots %v (%s) is not running", s.ranges, sn.id)
		}
		if role, err := n.Role(ctx); err != nil || role != "master" {
			return nil, fmt.Errorf("redistest: %s owns slots %v but says role %q (%v)", n.Addr(), s.ranges, role, err)
		}
		out = append(out, n)
	}
	return out, nil
}

func firstSlot(s shard) int {
	lo := numSlots
	for _, r := range s.ranges {
		lo = min(lo, r[0])
	}
	return lo
}

// Replicas returns the running nodes whose ROLE says replica, in start-up
// order; after a failover the old master is among them.
func (c *Cluster) Replicas(ctx context.Context) ([]*Node, error) {
	var out []*Node
	for _, n := range c.liveNodes() {
		role, err := n.Role(ctx)
		if err != nil {
			return nil, err
		}
		if role == "replica" {
			out = append(out, n)
		}
	}
	return out, nil
}

// NodeForSlot returns the master that owns slot now, as the live topology
// says, so that a test can kill or pause exactly the node behind a key.
func (c *Cluster) NodeForSlot(ctx context.Context, slot uint16) (*Node, error) {
	if slot >= numSlots {
		return nil, fmt.Errorf("redistest: slot %d out of range", slot)
	}
	shards, err := c.view(ctx)
	if err != nil {
		return nil, err
	}
	for _, s := range shards {
		if !s.owns(int(slot)) {
			continue
		}
		sn, ok := s.master()
		if !ok {
			break
		}
		if n := c.nodeByID(sn.id); n != nil {
			return n, nil
		}
		return nil, fmt.Errorf("redistest: slot %d is owned by unknown node %s", slot, sn.id)
	}
	return nil, fmt.Errorf("redistest: no master owns slot %d", slot)
}

// ReplicasOf returns the replicas of master per the live topology (failed
// ones included), so that a test can fail over exactly the shard behind a key.
func (c *Cluster) ReplicasOf(ctx context.Context, master *Node) ([]*Node, error) {
	shards, err := c.view(ctx)
	if err != nil {
		return nil, err
	}
	for _, s := range shards {
		if m, ok := s.master(); ok && m.id == master.id {
			var out []*Node
			for _, sn := range s.nodes {
				if sn.role != "master" {
					if n := c.nodeByID(sn.id); n != nil {
						out = append(out, n)
					}
				}
			}
			return out, nil
		}
	}
	return nil, fmt.Errorf("redistest: %s is not a master", master.Addr())
}
