package redistest

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Failover runs CLUSTER FAILOVER on replica with mode "" (coordinated: the
// master stops writes and hands over, nothing is lost), "FORCE" (no master
// agreement; acknowledged writes can be lost) or "TAKEOVER" (not even a vote
// of the other masters). It returns when replica says it is master and the
// cluster is ready again, so the next step of a test meets the new topology.
func (c *Cluster) Failover(ctx context.Context, replica *Node, mode string) error {
	mode = strings.ToUpper(strings.TrimSpace(mode))
	switch mode {
	case "", "FORCE", "TAKEOVER":
	default:
		return fmt.Errorf("redistest: failover mode %q: want \"\", FORCE or TAKEOVER", mode)
	}
	role, err := replica.Role(ctx)
	if err != nil {
		return err
	}
	if role != "replica" {
		return fmt.Errorf("redistest: failover on %s: it is %s, not a replica", replica.Addr(), role)
	}
	args := []string{"CLUSTER", "FAILOVER"}
	if mode != "" {
		args = append(args, mode)
	}
	if err := replica.Do(ctx, args...).Error(); err != nil {
		return fmt.Errorf("redistest: %s on %s: %w", strings.Join(args, " "), replica.Addr(), err)
	}
	wctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	if err := retry(wctx, func() error {
		role, err := replica.Role(wctx)
		if err != nil {
			return err
		}
		if role != "master" {
			return fmt.Errorf("%s is still %s", replica.Addr(), role)
		}
		return nil
	}); err != nil {
		return fmt.Errorf("redistest: failover to %s: %w", replica.Addr(), err)
	}
	return c.WaitReady(ctx)
}

// migrateBatch is how many keys one MIGRATE moves: large enough that a slot
// of thousands of keys moves in a few round trips, small enough that the
// source blocks its clients only briefly.
const migrateBatch = 100

// MoveSlot moves one slot, with its keys, to the master to, the way
// redis-cli --cluster reshard does: mark the slot IMPORTING on the target
// and MIGRATING on the source, MIGRATE its keys in batches, then assign it
// with SETSLOT NODE (target first, then source, then the other masters).
// Clients may keep writing meanwhile; they get ASK and TRYAGAIN replies, which
// is what tests of resharding want them to meet. It returns when the cluster
// is ready and every node agrees on the new owner.
func (c *Cluster) MoveSlot(ctx context.Context, slot uint16, to *Node) error {
	src, err := c.NodeForSlot(ctx, slot)
	if err != nil {
		return err
	}
	if src == to {
		return nil
	}
	if role, err := to.Role(ctx); err != nil || role != "master" {
		return fmt.Errorf("redistest: move slot %d to %s: not a master (%q, %v)", slot, to.Addr(), role, err)
	}
	s := strconv.Itoa(int(slot))
	if err := to.Do(ctx, "CLUSTER", "SETSLOT", s, "IMPORTING", src.id).Error(); err != nil {
		return fmt.Errorf("redistest: SETSLOT %s IMPORTING on %s: %w", s, to.Addr(), err)
	}
	if err := src.Do(ctx, "CLUSTER", "SETSLOT", s, "MIGRATING", to.id).Error(); err != nil {
		return fmt.Errorf("redistest: SETSLOT %s MIGRATING on %s: %w", s, src.Addr(), err)
	}
	for {
		keys, err := src.Do(ctx, "CLUSTER", "GETKEYSINSLOT", s, strconv.Itoa(migrateBatch)).AsStrSlice()
		if err != nil {
			return fmt.Errorf("redistest: GETKEYSINSLOT %s on %s: %w", s, src.Addr(), err)
		}
		if len(keys) == 0 {
			break
		}
		args := []string{"MIGRATE", "127.0.0.1", strconv.Itoa(to.port), "", "0", "10000", "KEYS"}
		args = append(args, keys...)
		// NOKEY: every key of the batch expired or was deleted since
		// GETKEYSINSLOT, which clients writing during the move can cause.
		if err := src.Do(ctx, args...).Error(); err != nil && !strings.Contains(err.Error(), "NOKEY") {
			return fmt.Errorf("redistest: MIGRATE %d keys of slot %s from %s to %s: %w", len(keys), s, src.Addr(), to.Addr(), err)
		}
	}
	masters, err := c.Masters(ctx)
	if err != nil {
		return err
	}
	order := []*Node{to, src}
	for _, m := range masters {
		if m != to && m != src {
			order = append(order, m)
		}
	}
	for _, m := range order {
		if err := m.Do(ctx, "CLUSTER", "SETSLOT", s, "NODE", to.id).Error(); err != nil {
			return fmt.Errorf("redistest: SETSLOT %s NODE on %s: %w", s, m.Addr(), err)
		}
	}
	return c.waitSlotOwner(ctx, slot, to)
}

// waitSlotOwner waits until every running node routes slot to owner, then
// for readiness: SETSLOT NODE reaches the replicas only by gossip.
func (c *Cluster) waitSlotOwner(ctx context.Context, slot uint16, owner *Node) error {
	wctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	// The new owner's config epoch, as it sees itself: SETSLOT NODE on an
	// importing node bumps it above every other.
	epoch, err := ownEpoch(wctx, owner)
	if err != nil {
		return err
	}
	err = retry(wctx, func() error {
		for _, n := range c.liveNodes() {
			// A node that still knows the new owner by an older epoch
			// lets a late gossip message of the old owner (sent before it
			// got its SETSLOT NODE) take the slot back: wait until every
			// node knows the owner's new epoch, after which that message
			// loses.
			if e, err := epochSeenBy(wctx, n, owner.id); err != nil || e < epoch {
				return fmt.Errorf("%s knows %s by epoch %d, not %d yet (%v)", n.Addr(), owner.Addr(), e, epoch, err)
			}
			shards, err := parseShards(n.Do(wctx, "CLUSTER", "SHARDS"))
			if err != nil {
				return fmt.Errorf("CLUSTER SHARDS on %s: %w", n.Addr(), err)
			}
			found := false
			for _, sh := range shards {
				if m, ok := sh.master(); ok && sh.owns(int(slot)) {
					if m.id != owner.id {
						return fmt.Errorf("%s still routes slot %d to %.8s", n.Addr(), slot, m.id)
					}
					found = true
				}
			}
			if !found {
				return fmt.Errorf("%s routes slot %d nowhere", n.Addr(), slot)
			}
		}
		return nil
	})
	if err != nil {
		return errors.Join(fmt.Errorf("redistest: move slot %d to %s", slot, owner.Addr()), err)
	}
	return c.WaitReady(ctx)
}

// ownEpoch returns the config epoch n announces for itself.
func ownEpoch(ctx context.Context, n *Node) (int64, error) {
	return epochSeenBy(ctx, n, n.id)
}

// ConfigEpoch returns the config epoch n announces for itself: for a
// master, the epoch a Locker's fencing tokens are drawn under on it
// (batch/scripts/fence.lua); a promoted replica announces a larger one
// than every master before it.
func (n *Node) ConfigEpoch(ctx context.Context) (int64, error) { return ownEpoch(ctx, n) }

// epochSeenBy returns the config epoch that node n has for the node with
// id: field 7 of its CLUSTER NODES line.
func epochSeenBy(ctx context.Context, n *Node, id string) (int64, error) {
	text, err := infoText(n.Do(ctx, "CLUSTER", "NODES"))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(text, "\n") {
		f := strings.Fields(line)
		if len(f) >= 7 && f[0] == id {
			return strconv.ParseInt(f[6], 10, 64)
		}
	}
	return 0, fmt.Errorf("%s does not list node %.8s", n.Addr(), id)
}
