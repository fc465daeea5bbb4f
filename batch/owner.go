package batch

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"time"

	"github.com/redis/rueidis"

	"github.com/slotlock/slotlock/internal/protocol"
	"github.com/slotlock/slotlock/internal/rediserr"
)

// maxStaleRetries bounds how often release and extend re-plan calls that
// reached a node which no longer owned their slots.
const maxStaleRetries = 5

// Release deletes, owner-checked, the lock keys idx (ascending set indexes;
// nil means all) that who still holds (protocol.Strategy). Lost names the
// keys no longer held (expired, taken over, deleted by an operator).
func (e *Engine) Release(ctx context.Context, set *protocol.Set, idx []int, who protocol.Who) protocol.OwnerResult {
	if !set.Plain() {
		jobs := kindJobs(set, idx, job{s: releaseScript, head: []string{who.Holder, who.Lease},
			holds: who.Lease != "", queue: true}, sharedReleaseScript, []string{who.Holder, who.Lease}, 0, false)
		return mergeResults(e.ownerChecked(ctx, jobs, nil))
	}
	if who.Lease == "" && (idx == nil && set.Len() == 1 || len(idx) == 1) {
		i := 0
		if idx != nil {
			i = idx[0]
		}
		if r, done := e.releaseOne(ctx, set, i, who); done {
			return r
		}
	}
	if idx == nil {
		idx = set.All(0)
	}
	return e.ownerChecked(ctx, []job{{s: releaseScript, set: set, idx: idx,
		head: []string{who.Holder, who.Lease}, holds: who.Lease != "", queue: true}}, nil)[0]
}

// releaseOne releases one plain lock key (no hold set) with a script of
// its own (release1.lua), sent through the cluster client like takeBare:
// it declares its one key, so following MOVED or ASK is safe. A Redis
// error means the script did not delete (it fails before, or not at all),
// so the general path runs instead (done false) and classifies it; a lost
// reply is reported as such, as the general path would: the key may be
// gone.
func (e *Engine) releaseOne(ctx context.Context, set *protocol.Set, i int, who protocol.Who) (r protocol.OwnerResult, done bool) {
	node, ok := e.oneKeyNode(ctx, set, i)
	if !ok {
		return r, false
	}
	n, err := release1Script.Exec(ctx, e.client, []string{set.Lock[i], set.QueueKey(i)}, []string{who.Holder}).AsInt64()
	switch err = e.oneKeyErr(node, err); {
	case err == nil && n == 0:
		r.Lost = []int{i}
	case err == nil:
	case rediserr.Lost(err):
		r.Failed = []int{i}
		r.Err = &protocol.NodeError{Node: node, Op: "release", Keys: 1, Kind: rediserr.ErrUnknownOutcome, Err: err}
	default:
		return r, false
	}
	return r, true
}

// Extend sets a new TTL on the keys idx (nil: all) of set, per call all or
// nothing: a call whose keys are not all held extends none of them
// (protocol.Strategy).
func (e *Engine) Extend(ctx context.Context, set *protocol.Set, idx []int, who protocol.Who, ttl time.Duration) protocol.OwnerResult {
	return e.ExtendMany(ctx, []protocol.ExtendJob{{Set: set, Idx: idx, Who: who, TTL: ttl}})[0]
}

// ExtendMany extends many leases in one pipelined round trip per node, as
// the watchdog does every period for all the leases it keeps alive.
func (e *Engine) ExtendMany(ctx context.Context, ext []protocol.ExtendJob) []protocol.OwnerResult {
	var w *waitAfter
	for _, x := range ext {
		if x.MinReplicas > 0 && (w == nil || x.MinReplicas > w.replicas) {
			w = &waitAfter{replicas: x.MinReplicas, timeout: x.ReplicaTimeout}
		}
	}
	jobs := make([]job, 0, len(ext))
	var of []int // of[k]: the ext index of job k (a request lease has one per kind)
	for i, x := range ext {
		ttl := strconv.FormatInt(x.TTL.Milliseconds(), 10)
		head := []string{x.Who.Holder, x.Who.Lease, ttl}
		own := kindJobs(x.Set, x.Idx, job{s: extendScript, head: head, holds: x.Who.Lease != ""},
			sharedExtendScript, head, len(jobs), true)
		jobs = append(jobs, own...)
		for range own {
			of = append(of, i)
		}
	}
	res := e.ownerChecked(ctx, jobs, w)
	if len(jobs) == len(ext) {
		return res
	}
	out := make([]protocol.OwnerResult, len(ext))
	groups := make([][]protocol.OwnerResult, len(ext))
	for k, r := range res {
		groups[of[k]] = append(groups[of[k]], r)
	}
	for i, g := range groups {
		out[i] = mergeResults(g)
	}
	return out
}

// mergeResults joins the results of the jobs of one set (its exclusive
// keys and its shared keys and permits go to different scripts).
func mergeResults(rs []protocol.OwnerResult) protocol.OwnerResult {
	if len(rs) == 1 {
		return rs[0]
	}
	var out protocol.OwnerResult
	var errs []error
	for _, r := range rs {
		out.Lost = append(out.Lost, r.Lost...)
		out.Failed = append(out.Failed, r.Failed...)
		errs = append(errs, r.Err)
	}
	slices.Sort(out.Lost)
	slices.Sort(out.Failed)
	out.Err = errors.Join(errs...)
	return out
}

// ownerChecked runs release or extend jobs, whose scripts return the
// positions of the keys the lease did not hold. Calls that reached a node
// which no longer serves their slots wrote nothing; they are planned again
// and resent.
func (e *Engine) ownerChecked(ctx context.Context, jobs []job, w *waitAfter) []protocol.OwnerResult {
	out := make([]protocol.OwnerResult, len(jobs))
	errs := make([][]error, len(jobs))
	pending := jobs
	for round := 0; len(pending) > 0; round++ {
		calls, gen, perr := e.plan(ctx, pending, e.perSlot.Load())
		if perr != nil {
			for _, j := range pending {
				errs[j.orig] = append(errs[j.orig], perr)
				out[j.orig].Failed = append(out[j.orig].Failed, j.idx...)
			}
			break
		}
		res, waits := e.exec(ctx, calls, pending, w)
		short := shortNodes(waits, w)
		lostReply := false
		retry := map[int][]int{} // job (in pending) -> indexes to resend
		for ci, res := range res {
			c := calls[ci]
			j := pending[c.job]
			k := j.orig
			pos, err := decodePositions(res, len(c.idx))
			if err != nil {
				ne, refused := e.classify(j.s, c, err) // a refused flag switches the engine per slot
				if ne.Kind == rediserr.ErrStaleTopology && !c.perSlot {
					e.markSlotMode(c.node)
				}
				lostReply = lostReply || ne.Kind == rediserr.ErrUnknownOutcome
				if (refused || ne.Kind == rediserr.ErrStaleTopology) && round < maxStaleRetries {
					retry[c.job] = append(retry[c.job], c.idx...)
				} else {
					errs[k] = append(errs[k], ne)
					out[k].Failed = append(out[k].Failed, c.idx...)
				}
				continue
			}
			for _, p := range pos {
				out[k].Lost = append(out[k].Lost, c.idx[p])
			}
			if s, ok := short[c.node]; ok {
				errs[k] = append(errs[k], &protocol.ReplicaError{Want: w.replicas, Shortfalls: []protocol.ReplicaShortfall{s}})
				out[k].Failed = append(out[k].Failed, c.idx...)
			}
		}
		if len(retry) == 0 {
			if lostReply {
				// A dead master, perhaps: read the map again for the next
				// renewal (bounded by ctx, coalesced with other callers).
				_, _ = e.topo.Refresh(ctx, gen)
			}
			break
		}
		if _, rerr := e.topo.Refresh(ctx, gen); rerr != nil && ctx.Err() != nil {
			for ji, idx := range retry {
				k := pending[ji].orig
				errs[k] = append(errs[k], rerr)
				out[k].Failed = append(out[k].Failed, idx...)
			}
			break
		}
		if err := protocol.SleepCtx(ctx, protocol.Backoff(round)); err != nil {
			for ji, idx := range retry {
				k := pending[ji].orig
				errs[k] = append(errs[k], err)
				out[k].Failed = append(out[k].Failed, idx...)
			}
			break
		}
		next := make([]job, 0, len(retry))
		for ji, idx := range retry {
			j := pending[ji]
			slices.Sort(idx)
			j.idx = idx
			next = append(next, j)
		}
		pending = next
	}
	for k := range out {
		slices.Sort(out[k].Lost)
		slices.Sort(out[k].Failed)
		out[k].Err = errors.Join(errs[k]...)
	}
	return out
}

// shortNodes returns the nodes whose WAIT reply came back short (or not at
// all), by address.
func shortNodes(waits map[string]rueidis.RedisResult, w *waitAfter) map[string]protocol.ReplicaShortfall {
	if w == nil {
		return nil
	}
	short := map[string]protocol.ReplicaShortfall{}
	for node, r := range waits {
		n, err := r.AsInt64()
		if acked, isShort := protocol.Acked(n, err, w.replicas); isShort {
			short[node] = protocol.ReplicaShortfall{Node: node, Acked: acked}
		}
	}
	return short
}
