package redistest

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// form turns freshly started nodes into a cluster with CLUSTER commands, as
// `redis-cli --cluster create` does, minus its one-second polling: assign
// each node its own config epoch, give each master a contiguous slot range,
// introduce every pair of nodes, attach replicas, then wait until ready.
func (c *Cluster) form(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	for i, n := range c.nodes {
		id, err := n.Do(ctx, "CLUSTER", "MYID").ToString()
		if err != nil {
			return fmt.Errorf("CLUSTER MYID on %s: %w", n.Addr(), err)
		}
		n.id = id
		// Distinct epochs before the nodes meet, so that no two masters
		// start with the same one and slot ownership never needs the
		// collision resolution.
		if err := n.Do(ctx, "CLUSTER", "SET-CONFIG-EPOCH", strconv.Itoa(i+1)).Error(); err != nil {
			return fmt.Errorf("CLUSTER SET-CONFIG-EPOCH on %s: %w", n.Addr(), err)
		}
	}
	masters := c.opt.Masters
	for i, n := range c.nodes[:masters] {
		lo, hi := i*numSlots/masters, (i+1)*numSlots/masters-1
		if err := n.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", strconv.Itoa(lo), strconv.Itoa(hi)).Error(); err != nil {
			return fmt.Errorf("CLUSTER ADDSLOTSRANGE %d %d on %s: %w", lo, hi, n.Addr(), err)
		}
	}
	// A full mesh of MEETs: gossip would spread a star as well, but only
	// after a few ping rounds.
	for i, a := range c.nodes {
		for _, b := range c.nodes[i+1:] {
			if err := a.Do(ctx, "CLUSTER", "MEET", "127.0.0.1", strconv.Itoa(b.port), strconv.Itoa(b.bus)).Error(); err != nil {
				return fmt.Errorf("CLUSTER MEET %s from %s: %w", b.Addr(), a.Addr(), err)
			}
		}
	}
	if err := c.waitMet(ctx); err != nil {
		return err
	}
	for k, r := range c.nodes[masters:] {
		m := c.nodes[k%masters]
		if err := retry(ctx, func() error {
			return r.Do(ctx, "CLUSTER", "REPLICATE", m.id).Error()
		}); err != nil {
			return fmt.Errorf("CLUSTER REPLICATE %s on %s: %w", m.Addr(), r.Addr(), err)
		}
	}
	if err := c.primeReplicas(ctx); err != nil {
		return err
	}
	return c.WaitReady(ctx)
}

// primeReplicas waits for every replica's first sync, then runs FLUSHALL on
// every master. Redis 7.0 reports a replica whose replication offset is
// still 0 as health "loading" (rueidis then leaves it out), and a fresh
// master's offset stays 0 until it propagates a write. FLUSHALL is such a
// write that has no key, so masters accept it during the two seconds after
// start-up in which cluster_state stays fail and keyed writes are refused;
// the offsets then reach the other nodes by gossip while that delay runs.
func (c *Cluster) primeReplicas(ctx context.Context) error {
	replicas := c.nodes[c.opt.Masters:]
	if err := retry(ctx, func() error {
		for _, r := range replicas {
			repl, err := infoText(r.Do(ctx, "INFO", "replication"))
			if err != nil {
				return fmt.Errorf("INFO replication on %s: %w", r.Addr(), err)
			}
			if !strings.Contains(repl, "master_link_status:up") {
				return fmt.Errorf("replica %s: %s", r.Addr(), infoField(repl, "master_link_status"))
			}
		}
		return nil
	}); err != nil {
		return err
	}
	for _, m := range c.nodes[:c.opt.Masters] {
		if err := m.Do(ctx, "FLUSHALL").Error(); err != nil {
			return fmt.Errorf("FLUSHALL on %s: %w", m.Addr(), err)
		}
	}
	return nil
}

// waitMet waits until every node knows every other node past the handshake,
// which CLUSTER REPLICATE requires of the master it names.
func (c *Cluster) waitMet(ctx context.Context) error {
	return retry(ctx, func() error {
		for _, n := range c.nodes {
			out, err := n.Do(ctx, "CLUSTER", "NODES").ToString()
			if err != nil {
				return fmt.Errorf("CLUSTER NODES on %s: %w", n.Addr(), err)
			}
			lines := strings.Split(strings.TrimSpace(out), "\n")
			if len(lines) != len(c.nodes) {
				return fmt.Errorf("%s knows %d of %d nodes", n.Addr(), len(lines), len(c.nodes))
			}
			for _, l := range lines {
				f := strings.Fields(l)
				if len(f) < 8 || strings.Contains(f[2], "handshake") || strings.Contains(f[2], "noaddr") || f[7] != "connected" {
					return fmt.Errorf("%s: node not joined yet: %s", n.Addr(), l)
				}
			}
		}
		return nil
	})
}

// retry polls fn until it succeeds or ctx ends, returning its last error.
func retry(ctx context.Context, fn func() error) error {
	for {
		err := fn()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (gave up: %v)", err, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}
