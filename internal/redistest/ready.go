package redistest

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/redis/rueidis"
)

// readyTimeout bounds WaitReady: a healthy 3+3 cluster settles in a second or
// two, a failover after a killed master in node-timeout (5 s) plus a few
// seconds. Past a minute something is broken, and the error says what.
const readyTimeout = 60 * time.Second

// WaitReady waits until the cluster is in a state where a test's outcome
// depends only on the test: every running node says cluster_state:ok, every
// running replica has its master link up, CLUSTER SHARDS shows Masters
// shards with slots covering all 16,384 slots, each served by a running
// master, every running node online in every view, and all running nodes
// agree on CLUSTER SLOTS (so no client is redirected by a stale node).
// Nodes killed or paused through the harness are left out, but a slot whose
// master is down makes the cluster not ready until a replica takes over.
//
// It gives up after a minute (or when ctx ends) with the last unmet
// condition. Redis 7.0 reports a replica that has seen no write as
// "loading"; WaitReady then writes and deletes a key on each master to move
// the replication offset.
func (c *Cluster) WaitReady(ctx context.Context) error {
	if c.startErr != nil {
		return c.startErr
	}
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	start := time.Now()
	var nudged time.Time
	for {
		reason, loading := c.readyCheck(ctx)
		if reason == "" {
			return nil
		}
		if loading && time.Since(nudged) > 300*time.Millisecond {
			c.nudgeMasters(ctx)
			nudged = time.Now()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("redistest: cluster not ready after %s: %s", time.Since(start).Round(time.Millisecond), reason)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// readyCheck returns why the cluster is not ready ("" when it is) and whether
// some node is reported as loading.
func (c *Cluster) readyCheck(ctx context.Context) (reason string, loading bool) {
	live := c.liveNodes()
	if len(live) == 0 {
		return "no node is running", false
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if c.standalone {
		for _, n := range live {
			if err := n.Do(ctx, "PING").Error(); err != nil {
				return fmt.Sprintf("%s: PING: %v", n.Addr(), err), false
			}
		}
		return "", false
	}
	var firstSig string
	for i, n := range live {
		res := n.doMulti(ctx,
			[]string{"CLUSTER", "INFO"},
			[]string{"CLUSTER", "SHARDS"},
			[]string{"CLUSTER", "SLOTS"},
			[]string{"ROLE"},
			[]string{"INFO", "replication"},
		)
		info, err := infoText(res[0])
		if err != nil {
			return fmt.Sprintf("%s: CLUSTER INFO: %v", n.Addr(), err), false
		}
		if !strings.Contains(info, "cluster_state:ok") {
			return fmt.Sprintf("%s: %s", n.Addr(), infoField(info, "cluster_state")), false
		}
		shards, err := parseShards(res[1])
		if err != nil {
			return fmt.Sprintf("%s: %v", n.Addr(), err), false
		}
		owners, err := slotOwners(res[2])
		if err != nil {
			return fmt.Sprintf("%s: %v", n.Addr(), err), false
		}
		withSlotsFromSlots(shards, owners)
		if r, l := c.shardsReady(shards, live); r != "" {
			return fmt.Sprintf("%s sees %s", n.Addr(), r), l
		}
		sig, err := slotsSignature(res[2])
		if err != nil {
			return fmt.Sprintf("%s: %v", n.Addr(), err), false
		}
		if i == 0 {
			firstSig = sig
		} else if sig != firstSig {
			return fmt.Sprintf("CLUSTER SLOTS of %s and %s differ", live[0].Addr(), n.Addr()), false
		}
		role, err := res[3].ToArray()
		if err != nil || len(role) == 0 {
			return fmt.Sprintf("%s: ROLE: %v", n.Addr(), err), false
		}
		if r, _ := role[0].ToString(); r == "slave" {
			repl, err := infoText(res[4])
			if err != nil {
				return fmt.Sprintf("%s: INFO replication: %v", n.Addr(), err), false
			}
			if !strings.Contains(repl, "master_link_status:up") {
				return fmt.Sprintf("replica %s: %s", n.Addr(), infoField(repl, "master_link_status")), false
			}
		}
	}
	return "", false
}

// shardsReady checks one node's CLUSTER SHARDS against the definition of
// ready.
func (c *Cluster) shardsReady(shards []shard, live []*Node) (reason string, loading bool) {
	withSlots, covered := 0, 0
	health := map[string]string{}
	for _, s := range shards {
		for _, sn := range s.nodes {
			health[sn.id] = sn.health
		}
		if s.slotCount() == 0 {
			// A running node in a shard of its own without slots: its
			// shard ID and its master's have not converged yet in this
			// view. Valkey 8.0 persists those IDs in nodes.conf, and a
			// node killed in that state cannot start again ("corrupted
			// cluster config file", valkey-io/valkey#774); Redis 7.0
			// shows the same state right after create. Wait for it.
			for _, sn := range s.nodes {
				if n := c.nodeByID(sn.id); n != nil && n.getState() == nodeUp {
					return fmt.Sprintf("%s in a shard without slots", n.Addr()), sn.health == "loading"
				}
			}
			continue
		}
		withSlots++
		covered += s.slotCount()
		m, ok := s.master()
		if !ok {
			return fmt.Sprintf("slots %v without a master", s.ranges), false
		}
		if n := c.nodeByID(m.id); n == nil || n.getState() != nodeUp {
			return fmt.Sprintf("slots %v served by a master that is down (%.8s)", s.ranges, m.id), false
		}
	}
	if withSlots != c.opt.Masters {
		return fmt.Sprintf("%d shards with slots, want %d", withSlots, c.opt.Masters), false
	}
	if covered != numSlots {
		return fmt.Sprintf("%d of %d slots assigned", covered, numSlots), false
	}
	for _, n := range live {
		switch h := health[n.id]; h {
		case "online":
		case "":
			return fmt.Sprintf("no shard lists %s", n.Addr()), false
		default:
			return fmt.Sprintf("%s as %s", n.Addr(), h), h == "loading"
		}
	}
	return "", false
}

// nudgeMasters writes and deletes one key on every master so that its
// replicas' replication offset leaves 0, which Redis 7.0 reports as
// health "loading" (and which rueidis then avoids).
func (c *Cluster) nudgeMasters(ctx context.Context) {
	shards, err := c.view(ctx)
	if err != nil {
		return
	}
	for _, s := range shards {
		m, ok := s.master()
		if !ok || s.slotCount() == 0 {
			continue
		}
		n := c.nodeByID(m.id)
		if n == nil || n.getState() != nodeUp {
			continue
		}
		key := keyInShard("redistest:ready:", s)
		n.doMulti(ctx, []string{"SET", key, "1"}, []string{"DEL", key})
	}
}

// infoText reads an INFO-style reply. In RESP3 these are verbatim strings,
// which rueidis hands over with their "txt:" format prefix.
func infoText(res rueidis.RedisResult) (string, error) {
	s, err := res.ToString()
	return strings.TrimPrefix(s, "txt:"), err
}

// infoField returns the "name:value" line of an INFO-style reply, for error
// messages.
func infoField(info, name string) string {
	for line := range strings.SplitSeq(info, "\n") {
		if strings.HasPrefix(line, name+":") {
			return strings.TrimSpace(line)
		}
	}
	return name + " missing"
}
