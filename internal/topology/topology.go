// Package topology reads which master owns each hash slot from a live
// cluster (CLUSTER SHARDS, falling back to CLUSTER SLOTS) and keeps the
// current view, refreshed on demand when a reply shows it is stale (a MOVED,
// a "non local key" from a script, a failover).
package topology

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"

	"github.com/slotlock/slotlock/slot"
)

// ErrTopology reports that the slot map could not be read or is incomplete.
var ErrTopology = errors.New("topology: cannot read the slot map")

// minRefreshGap bounds how often a storm of stale replies can make us ask
// the cluster again: every caller that sees a stale reply within the gap
// shares one refresh.
const minRefreshGap = 50 * time.Millisecond

// Source keeps the current slot map of one client.
type Source struct {
	client rueidis.Client

	cur atomic.Pointer[slot.Map]
	gen atomic.Uint64 // bumped on every successful refresh

	mu      sync.Mutex // serialises refreshes
	lastRun time.Time
}

// New returns a Source for client. It reads nothing until Current or
// Refresh is called.
func New(client rueidis.Client) *Source {
	return &Source{client: client}
}

// Current returns the slot map, reading it first if none was read yet.
func (s *Source) Current(ctx context.Context) (*slot.Map, error) {
	if m := s.cur.Load(); m != nil {
		return m, nil
	}
	return s.Refresh(ctx, 0)
}

// Loaded returns the slot map as last read, nil before the first read;
// it sends nothing.
func (s *Source) Loaded() *slot.Map { return s.cur.Load() }

// Generation returns a number that changes whenever the map is replaced;
// pass it to Refresh so that callers who saw the same stale map refresh once.
func (s *Source) Generation() uint64 { return s.gen.Load() }

// Refresh reads the slot map again unless another caller already replaced
// the map seen at generation seen, and returns the newest map.
func (s *Source) Refresh(ctx context.Context, seen uint64) (*slot.Map, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if m := s.cur.Load(); m != nil && s.gen.Load() != seen {
		return m, nil // someone refreshed since the caller looked
	}
	if wait := minRefreshGap - time.Since(s.lastRun); wait > 0 {
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, context.Cause(ctx)
		}
	}
	s.lastRun = time.Now()
	m, err := Read(ctx, s.client)
	if err != nil {
		if old := s.cur.Load(); old != nil {
			return old, err
		}
		return nil, err
	}
	s.cur.Store(m)
	s.gen.Add(1)
	return m, nil
}

// ErrClientMode reports a client that cannot reach every slot: a
// standalone (or sentinel) client whose server is one master of a Redis
// Cluster with several. Every call for another master's slot would come
// back MOVED, and the client would never follow; a new attempt cannot fix
// that, a cluster client can.
var ErrClientMode = errors.New("slotlock: not a cluster client, but the server is one master of a cluster")

// Read fetches the slot map once. A standalone (or sentinel) client gets a
// map where its one node owns every slot, unless that node is in cluster
// mode and does not serve every slot (ErrClientMode).
func Read(ctx context.Context, c rueidis.Client) (*slot.Map, error) {
	if c.Mode() != rueidis.ClientModeCluster {
		addr := "standalone"
		for a := range c.Nodes() {
			addr = a
		}
		if err := singleNodeFits(ctx, c, addr); err != nil {
			return nil, err
		}
		return slot.SingleNode(addr), nil
	}
	m, err := readFrom(ctx, c)
	if err == nil {
		return m, nil
	}
	// The cluster client sends a keyless command to any node it knows, and
	// it still knows a master that died until its own view is refreshed:
	// right after a failover about one read in six went to the dead node
	// (TestReadAfterFailover). Any other node's view will do: ask each in
	// turn, through its own client, until one answers.
	for _, nc := range c.Nodes() {
		if ctx.Err() != nil {
			break
		}
		if m, nerr := readFrom(ctx, nc); nerr == nil {
			return m, nil
		}
	}
	return nil, err
}

// singleNodeFits returns ErrClientMode, naming the node, when the one
// node of a non-cluster client is a cluster master that does not own every
// slot. A server without cluster mode refuses CLUSTER SHARDS and
// CLUSTER SLOTS, and that refusal (or any error reading them) is taken as
// "not a cluster": the client's own commands will say more than a guess.
func singleNodeFits(ctx context.Context, c rueidis.Client, addr string) error {
	m, err := readFrom(ctx, c)
	if err != nil || len(m.Addrs) <= 1 {
		return nil
	}
	return fmt.Errorf("%w: %s is one of %d masters (a rueidis client made with ForceSingleClient, or a sentinel client?): use a cluster client", ErrClientMode, addr, len(m.Addrs))
}

// readFrom asks one client (the cluster client, or one node's own) for the
// slot map.
func readFrom(ctx context.Context, c rueidis.Client) (*slot.Map, error) {
	m, errShards := readShards(ctx, c)
	if errShards == nil {
		return m, nil
	}
	// CLUSTER SHARDS is Redis 7+; older servers and some proxies only know
	// CLUSTER SLOTS. Redis 7.4 also lists a shard without its slots after a
	// failover (TestSlotMapAfterFailoverRedis74), which CLUSTER SLOTS
	// gets right.
	m, errSlots := readSlots(ctx, c)
	if errSlots == nil {
		return m, nil
	}
	return nil, fmt.Errorf("%w: CLUSTER SHARDS: %v; CLUSTER SLOTS: %w", ErrTopology, errShards, errSlots)
}

// do runs one command and returns when it answers or ctx ends, whichever
// comes first: rueidis can wait for a redial of a paused node without
// watching the caller's context, and a slot map read must not hang the
// Locker behind it. A late reply is discarded.
func do(ctx context.Context, c rueidis.Client, cmd rueidis.Completed) rueidis.RedisResult {
	ch := make(chan rueidis.RedisResult, 1)
	go func() { ch <- c.Do(ctx, cmd) }()
	select {
	case r := <-ch:
		return r
	case <-ctx.Done():
		return rueidis.NewErrorResult(context.Cause(ctx))
	}
}

func readShards(ctx context.Context, c rueidis.Client) (*slot.Map, error) {
	reply, err := do(ctx, c, c.B().ClusterShards().Build()).ToArray()
	if err != nil {
		return nil, err
	}
	shards, err := decodeShards(reply)
	if err != nil {
		return nil, err
	}
	return mapFromShards(shards)
}

// shard is one CLUSTER SHARDS entry: its slot ranges as pairs of bounds,
// and its nodes with their announced addresses (addrs[i] is nodes[i]'s).
type shard struct {
	ranges []int64
	nodes  []ShardNode
	addrs  []string
}

func decodeShards(reply []rueidis.RedisMessage) ([]shard, error) {
	out := make([]shard, 0, len(reply))
	for _, sh := range reply {
		f, err := sh.AsMap()
		if err != nil {
			return nil, err
		}
		slots, nodesMsg := f["slots"], f["nodes"]
		ranges, err := slots.AsIntSlice()
		if err != nil {
			return nil, fmt.Errorf("shard slots: %w", err)
		}
		nodes, err := nodesMsg.ToArray()
		if err != nil {
			return nil, fmt.Errorf("shard nodes: %w", err)
		}
		s := shard{ranges: ranges}
		for _, n := range nodes {
			nf, err := n.AsMap()
			if err != nil {
				return nil, err
			}
			role, health := nf["role"], nf["health"]
			var sn ShardNode
			sn.Role, _ = role.ToString()
			sn.Health, _ = health.ToString()
			s.nodes = append(s.nodes, sn)
			s.addrs = append(s.addrs, shardNodeAddr(nf))
		}
		out = append(out, s)
	}
	return out, nil
}

// mapFromShards assigns every shard's slots to the master PickMaster
// chooses among its nodes.
func mapFromShards(shards []shard) (*slot.Map, error) {
	m := slot.NewMap()
	for _, s := range shards {
		if len(s.ranges) == 0 {
			continue // Redis 7.0 can list a replica as its own empty shard
		}
		i := PickMaster(s.nodes)
		if i < 0 {
			return nil, fmt.Errorf("a shard owning slots %v has no master", s.ranges)
		}
		for k := 0; k+1 < len(s.ranges); k += 2 {
			if err := m.Assign(uint16(s.ranges[k]), uint16(s.ranges[k+1]), s.addrs[i]); err != nil {
				return nil, err
			}
		}
	}
	if err := m.Covered(); err != nil {
		return nil, err
	}
	return m, nil
}

func shardNodeAddr(nf map[string]rueidis.RedisMessage) string {
	endpoint, ip, portMsg, tlsPort := nf["endpoint"], nf["ip"], nf["port"], nf["tls-port"]
	host, _ := endpoint.ToString()
	if host == "" || host == "?" {
		host, _ = ip.ToString()
	}
	port, err := portMsg.AsInt64()
	if err != nil {
		port, _ = tlsPort.AsInt64()
	}
	return net.JoinHostPort(host, strconv.FormatInt(port, 10))
}

func readSlots(ctx context.Context, c rueidis.Client) (*slot.Map, error) {
	ranges, err := do(ctx, c, c.B().ClusterSlots().Build()).ToArray()
	if err != nil {
		return nil, err
	}
	m := slot.NewMap()
	for _, r := range ranges {
		f, err := r.ToArray()
		if err != nil || len(f) < 3 {
			return nil, fmt.Errorf("bad CLUSTER SLOTS entry: %v", err)
		}
		lo, err1 := f[0].AsInt64()
		hi, err2 := f[1].AsInt64()
		master, err3 := f[2].ToArray()
		if err := errors.Join(err1, err2, err3); err != nil || len(master) < 2 {
			return nil, fmt.Errorf("bad CLUSTER SLOTS entry: %v", err)
		}
		host, _ := master[0].ToString()
		port, _ := master[1].AsInt64()
		if err := m.Assign(uint16(lo), uint16(hi), net.JoinHostPort(host, strconv.FormatInt(port, 10))); err != nil {
			return nil, err
		}
	}
	if err := m.Covered(); err != nil {
		return nil, err
	}
	return m, nil
}
