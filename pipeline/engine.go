package pipeline

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/rueidis"

	"github.com/slotlock/slotlock/batch"
	"github.com/slotlock/slotlock/internal/topology"
)

// maxTopologyRetries bounds TryLock's silent retries when a slot moved
// under it or a reply was lost: that is not a conflict, so it should not
// surface as one.
const maxTopologyRetries = 5

// Engine locks keys with pipelined SET NX PX, no Lua. It offers the Locker
// what batch.Engine offers, over the same Sets, Requests and Grants, except
// reentrant leases (Who.Lease) and fencing tokens: the Locker refuses those
// before it gets here.
type Engine struct {
	client rueidis.Client
	topo   *topology.Source
	cond   condProbe
}

// New returns an Engine for client, reading slot ownership from topo.
func New(client rueidis.Client, topo *topology.Source) *Engine {
	return &Engine{client: client, topo: topo}
}

// TryLock makes one attempt to take every key of set, all or nothing: one
// SET NX PX per key, one pipelined round trip per node, all nodes in
// parallel. If any key fails (held by someone else, or an error), the keys
// the attempt did set are released at once, owner-checked, before it
// returns; a *batch.ConflictError names the held keys. A moved slot or a
// lost reply is retried (with the refreshed slot map), a conflict is not.
func (e *Engine) TryLock(ctx context.Context, set *batch.Set, r batch.Request) (batch.Grant, error) {
	for round := 0; ; round++ {
		t0 := time.Now()
		a := e.acquire(ctx, set, 0, r)
		if a.firstFailure(0) == set.Len() {
			return e.granted(ctx, set, r, a.shortfalls, t0)
		}
		var rbErr error
		if w := maybeOurs(a.state); len(w) > 0 {
			rbErr = e.rollback(ctx, set, w, r)
		}
		if len(a.conflicts) > 0 {
			return batch.Grant{}, errors.Join(conflictError(set, a.conflicts), a.err, rbErr)
		}
		if err := ctx.Err(); err != nil {
			return batch.Grant{}, errors.Join(context.Cause(ctx), a.err, rbErr)
		}
		if transient(a.err) && rbErr == nil && round < maxTopologyRetries {
			if err := batch.SleepCtx(ctx, batch.Backoff(round)); err != nil {
				return batch.Grant{}, errors.Join(err, a.err)
			}
			continue
		}
		return batch.Grant{}, errors.Join(a.err, rbErr)
	}
}

// Lock takes every key of set, waiting as long as ctx allows, with the
// liveness rules of the Lua engine (batch.Engine.Lock): keys are taken in
// canonical order; after each attempt the keys below the first one it
// could not get are kept, and everything above it is given back before it
// waits, so a waiter only ever holds keys below the one it waits for (no
// deadlock) and never loses the prefix it has (no livelock).
//
// Without a script nobody can mark the key we wait for, so no release
// message will come: w is not used. The wait is a jittered exponential
// backoff (50 ms doubling to 1 s) bounded by the holder's remaining TTL.
// The kept prefix is re-expired (owner-checked) when a long wait has used
// a third of its TTL, and at the grant, so that every key ends with the
// expiry of the final attempt. On ctx end or a hard error everything is
// rolled back, owner-checked, on a context detached from ctx and bounded
// by r.Cleanup.Timeout.
func (e *Engine) Lock(ctx context.Context, set *batch.Set, r batch.Request, _ *batch.Waker) (batch.Grant, error) {
	n := set.Len()
	var (
		held = 0 // keys [0, held) are ours
		// since[i] is a moment before key i last got its expiry, for the
		// keys that may be ours (zero otherwise).
		since = make([]time.Time, n)
		// touched[i]: an attempt may have written key i and no release
		// has cleared it since; what a rollback must cover.
		touched  = make([]bool, n)
		short    []int    // acked replicas of key i's write, or -1
		node     []string // master of key i's write, with short
		waits    = 0
		lastWait = -1
	)
	if r.MinReplicas > 0 {
		short, node = make([]int, n), make([]string, n)
		for i := range short {
			short[i] = -1
		}
	}
	giveUp := func(cause error) (batch.Grant, error) {
		return batch.Grant{}, errors.Join(cause, e.rollback(ctx, set, indexes(touched), r))
	}
	for {
		if ctx.Err() != nil {
			return giveUp(context.Cause(ctx))
		}
		if held > 0 && time.Since(oldest(since[:held])) > r.TTL/3 {
			// A long wait: keep the prefix from expiring under us.
			bad, err := e.renew(ctx, set, span(0, held), r, since)
			if err != nil && !transient(err) {
				return giveUp(err)
			}
			held = min(held, bad)
		}
		t0 := time.Now()
		a := e.acquire(ctx, set, held, r)
		for i := held; i < n; i++ {
			if a.state[i] != batch.NotHeld {
				touched[i] = true
				if since[i].IsZero() {
					since[i] = t0 // a lost reply: the SET, if it ran, ran after t0
				}
			}
		}
		for _, i := range a.written {
			since[i] = t0
			if short != nil {
				short[i], node[i] = -1, a.node[i]
				if acked, ok := a.shortfalls[a.node[i]]; ok {
					short[i] = acked
				}
			}
		}
		f := a.firstFailure(held)
		failure := a.err
		if f == n {
			// Every key is ours. The ones taken before this attempt still
			// carry an older expiry: bring them up to this attempt's.
			var old []int
			for i := range n {
				if since[i].Before(t0) {
					old = append(old, i)
				}
			}
			bad, err := e.renew(ctx, set, old, r, since)
			if bad == n && err == nil {
				return e.granted(ctx, set, r, shortfalls(short, node), t0)
			}
			f, failure = bad, errors.Join(failure, err)
		}
		if failure != nil && !transient(failure) {
			// A failure waiting will not fix (a refused command, a wrong
			// type at a lock key): give back all.
			return giveUp(failure)
		}
		if ctx.Err() != nil {
			return giveUp(errors.Join(context.Cause(ctx), failure))
		}

		// Give back what lies above the first failure; it runs while we
		// wait, since nothing it does can block on us.
		var above []int
		for i := f + 1; i < n; i++ {
			if touched[i] {
				above = append(above, i)
			}
		}
		held = f
		trimmed := make(chan *checked, 1)
		go func() {
			if len(above) == 0 {
				trimmed <- nil
				return
			}
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.Cleanup.Timeout)
			defer cancel()
			trimmed <- e.ownerChecked(rctx, opRelease, e.items(set, above, r.Who.Holder, 0))
		}()

		var d time.Duration
		if c, ok := conflictAt(a.conflicts, f); ok {
			if f != lastWait {
				waits, lastWait = 0, f
			}
			d = waitFor(c.TTL, waits)
		} else {
			// A moved slot, a lost reply or a lost prefix key at f: try
			// again shortly.
			d = batch.Backoff(waits)
		}
		waits++
		if held > 0 {
			d = min(d, max(r.TTL/3, time.Millisecond))
		}
		werr := batch.SleepCtx(ctx, d)
		if c := <-trimmed; c != nil {
			for k, i := range above {
				if c.out[k] != failed {
					touched[i], since[i] = false, time.Time{}
				}
			}
		}
		if werr != nil {
			return giveUp(werr)
		}
	}
}

// Release deletes, owner-checked, the lock keys idx (ascending set indexes;
// nil means all) that who still holds: a key whose value is who's token,
// with or without a waiter's mark; a marked key's release publishes the
// wake-up the Lua waiter listens for. It returns the indexes of keys no
// longer held (expired, taken over, deleted by an operator).
func (e *Engine) Release(ctx context.Context, set *batch.Set, idx []int, who batch.Who) ([]int, error) {
	if idx == nil {
		idx = span(0, set.Len())
	}
	c := e.ownerChecked(ctx, opRelease, e.items(set, idx, who.Holder, 0))
	return c.collect(0, idx)
}

// Extend sets a new TTL on every key of set that who still holds, and
// returns the indexes of keys no longer held. Unlike the Lua engine, which
// extends a node's keys all or nothing, each key is checked and extended
// on its own (per slot, in one transaction): the lease ends as lost either
// way.
func (e *Engine) Extend(ctx context.Context, set *batch.Set, who batch.Who, ttl time.Duration) ([]int, error) {
	r := e.ExtendMany(ctx, []batch.ExtendJob{{Set: set, Who: who, TTL: ttl}})
	return r[0].Lost, r[0].Err
}

// ExtendMany extends many leases at once, as the watchdog does every period
// for all the leases it keeps alive: the keys of all jobs are grouped
// together, per slot for the transactions (one transaction may cover keys
// of several leases) and per node for the connections.
func (e *Engine) ExtendMany(ctx context.Context, jobs []batch.ExtendJob) []batch.OwnerResult {
	var items []item
	starts := make([]int, len(jobs))
	for j, x := range jobs {
		starts[j] = len(items)
		items = append(items, e.items(x.Set, span(0, x.Set.Len()), x.Who.Holder, x.TTL)...)
	}
	c := e.ownerChecked(ctx, opExtend, items)
	out := make([]batch.OwnerResult, len(jobs))
	for j, x := range jobs {
		out[j].Lost, out[j].Err = c.collect(starts[j], span(0, x.Set.Len()))
	}
	return out
}

// items makes the owner-checked items of the keys idx of set.
func (e *Engine) items(set *batch.Set, idx []int, token string, ttl time.Duration) []item {
	out := make([]item, len(idx))
	for k, i := range idx {
		out[k] = item{key: set.Lock[i], slot: set.Keys[i].Slot, token: token, ms: ttl.Milliseconds()}
	}
	return out
}

// renew gives the keys idx of set a new expiry of r.TTL, owner-checked, and
// records it in since. It returns the smallest index it could not confirm
// as still ours (set.Len() when all were), and the errors it met.
func (e *Engine) renew(ctx context.Context, set *batch.Set, idx []int, r batch.Request, since []time.Time) (int, error) {
	if len(idx) == 0 {
		return set.Len(), nil
	}
	t := time.Now()
	c := e.ownerChecked(ctx, opExtend, e.items(set, idx, r.Who.Holder, r.TTL))
	bad := set.Len()
	for k, i := range idx {
		if c.out[k] == done {
			since[i] = t
		} else {
			bad = min(bad, i)
		}
	}
	_, err := c.collect(0, idx)
	return bad, err
}

// granted turns a fully held acquisition into a Grant, or into an error
// after rolling back when replicas fell short.
func (e *Engine) granted(ctx context.Context, set *batch.Set, r batch.Request, short map[string]int, t0 time.Time) (batch.Grant, error) {
	g := batch.Grant{Deadline: t0.Add(r.TTL)}
	if len(short) == 0 {
		return g, nil
	}
	rerr := &batch.ReplicaError{Want: r.MinReplicas, Shortfalls: shortfallList(short)}
	if r.WarnOnReplicas {
		g.Warning = rerr
		return g, nil
	}
	return batch.Grant{}, errors.Join(rerr, e.rollback(ctx, set, nil, r))
}

// rollback releases, owner-checked, the keys idx (nil: all) of a failed
// acquisition. It runs on a context detached from the caller's (a
// cancelled caller must still not leave keys locked) but bounded by
// r.Cleanup.Timeout.
func (e *Engine) rollback(ctx context.Context, set *batch.Set, idx []int, r batch.Request) error {
	if idx != nil && len(idx) == 0 {
		return nil
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.Cleanup.Timeout)
	defer cancel()
	if _, err := e.Release(rctx, set, idx, r.Who); err != nil {
		return fmt.Errorf("rollback (keys expire by their TTL): %w", err)
	}
	return nil
}

func conflictError(set *batch.Set, cs []batch.Conflict) *batch.ConflictError {
	out := &batch.ConflictError{Conflicts: make([]batch.KeyConflict, len(cs))}
	for i, c := range cs {
		out.Conflicts[i] = batch.KeyConflict{Key: set.Keys[c.Index].Name, TTL: c.TTL}
	}
	return out
}

func conflictAt(cs []batch.Conflict, idx int) (batch.Conflict, bool) {
	for _, c := range cs {
		if c.Index == idx {
			return c, true
		}
	}
	return batch.Conflict{}, false
}

// maybeOurs returns the indexes an attempt may have written.
func maybeOurs(st []batch.KeyState) []int {
	var out []int
	for i, s := range st {
		if s != batch.NotHeld {
			out = append(out, i)
		}
	}
	return out
}

// shortfalls gathers, per master, the fewest acknowledgements among the
// writes of the keys a Lock holds.
func shortfalls(short []int, node []string) map[string]int {
	var out map[string]int
	for i, acked := range short {
		if acked < 0 {
			continue
		}
		if out == nil {
			out = map[string]int{}
		}
		if prev, ok := out[node[i]]; !ok || acked < prev {
			out[node[i]] = acked
		}
	}
	return out
}

func indexes(flags []bool) []int {
	out := []int{}
	for i, f := range flags {
		if f {
			out = append(out, i)
		}
	}
	return out
}

func span(from, to int) []int {
	out := make([]int, 0, to-from)
	for i := from; i < to; i++ {
		out = append(out, i)
	}
	return out
}

func oldest(ts []time.Time) time.Time {
	o := ts[0]
	for _, t := range ts[1:] {
		if t.Before(o) {
			o = t
		}
	}
	return o
}
