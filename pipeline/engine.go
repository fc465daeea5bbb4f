package pipeline

import (
	"context"
	"time"

	"github.com/redis/rueidis"

	"github.com/slotlock/slotlock/internal/protocol"
	"github.com/slotlock/slotlock/internal/topology"
)

// Engine locks keys with pipelined SET NX PX, no Lua: a protocol.Strategy
// like batch.Engine, over the same Sets and Requests, except reentrant
// leases (Who.Lease) and fencing tokens, which the Locker refuses before
// it gets here.
type Engine struct {
	client rueidis.Client
	topo   *topology.Source
	cond   condProbe
}

var _ protocol.Strategy = (*Engine)(nil)

// New returns an Engine for client, reading slot ownership from topo.
func New(client rueidis.Client, topo *topology.Source) *Engine {
	return &Engine{client: client, topo: topo}
}

// RefreshesHeld is false: SET NX cannot re-expire a key the lease holds,
// so the protocol renews kept keys itself (protocol.Strategy).
func (e *Engine) RefreshesHeld() bool { return false }

// Wait sleeps before the next attempt on key i (protocol.Strategy).
// Without a script nobody can mark the key, so no release message will
// come: the wait is a jittered exponential backoff bounded by the holder's
// remaining TTL (waitFor) and by limit.
func (e *Engine) Wait(ctx context.Context, _ *protocol.Set, _ int, c protocol.Conflict, _ *protocol.Request, attempt int, limit time.Duration) error {
	return protocol.SleepCtx(ctx, min(waitFor(c.TTL, attempt), limit))
}

// Release deletes, owner-checked, the lock keys idx (ascending set indexes;
// nil means all) that who still holds: a key whose value is who's token,
// with or without a waiter's mark (protocol.Strategy).
func (e *Engine) Release(ctx context.Context, set *protocol.Set, idx []int, who protocol.Who) protocol.OwnerResult {
	if idx == nil {
		idx = set.All(0)
	}
	c := e.ownerChecked(ctx, opRelease, e.items(set, idx, who.Holder, 0))
	return c.collect(0, idx)
}

// Extend sets a new TTL on the keys idx (nil: all) of set that who still
// holds (protocol.Strategy). Unlike the Lua engine, which extends a node's
// keys all or nothing, each key is checked and extended on its own (per
// slot, in one transaction): the lease ends as lost either way.
func (e *Engine) Extend(ctx context.Context, set *protocol.Set, idx []int, who protocol.Who, ttl time.Duration) protocol.OwnerResult {
	return e.ExtendMany(ctx, []protocol.ExtendJob{{Set: set, Idx: idx, Who: who, TTL: ttl}})[0]
}

// ExtendMany extends many leases at once, as the watchdog does every period
// for all the leases it keeps alive: the keys of all jobs are grouped
// together, per slot for the transactions (one transaction may cover keys
// of several leases) and per node for the connections.
func (e *Engine) ExtendMany(ctx context.Context, jobs []protocol.ExtendJob) []protocol.OwnerResult {
	var items []item
	starts := make([]int, len(jobs))
	idxs := make([][]int, len(jobs))
	for j, x := range jobs {
		starts[j] = len(items)
		idxs[j] = x.Idx
		if idxs[j] == nil {
			idxs[j] = x.Set.All(0)
		}
		items = append(items, e.items(x.Set, idxs[j], x.Who.Holder, x.TTL)...)
	}
	c := e.ownerChecked(ctx, opExtend, items)
	out := make([]protocol.OwnerResult, len(jobs))
	for j := range jobs {
		out[j] = c.collect(starts[j], idxs[j])
	}
	return out
}

// items makes the owner-checked items of the keys idx of set.
func (e *Engine) items(set *protocol.Set, idx []int, token string, ttl time.Duration) []item {
	out := make([]item, len(idx))
	for k, i := range idx {
		out[k] = item{key: set.Lock[i], slot: set.Keys[i].Slot, token: token, ms: ttl.Milliseconds()}
	}
	return out
}
