package batch

import (
	"context"
	"errors"
	"slices"
	"strconv"

	"github.com/slotlock/slotlock/internal/protocol"
	"github.com/slotlock/slotlock/internal/rediserr"
)

// Attempt makes one attempt to take keys from..Len()-1 of set for r.Who
// (protocol.Strategy). A plain lease of a few keys may first send bare SET
// NX commands (bare.go); the keys they leave go to acquire.lua, where every
// node's call takes its keys as the mode says (all or nothing, or up to the
// first conflict) and writes nothing otherwise. The calls of all nodes go
// out in one pipelined round trip.
func (e *Engine) Attempt(ctx context.Context, set *protocol.Set, from int, r *protocol.Request, opt protocol.AttemptOptions) protocol.Attempt {
	a := protocol.Attempt{State: make([]protocol.KeyState, set.Len())}
	var idx []int
	if set.Plain() && e.bareFits(set.Len()-from, r, opt) {
		if taken, tried := e.takeBare(ctx, set, from, r, a.State); taken {
			return a
		} else if tried {
			// The script goes on with the keys the bare commands did not
			// get; what they got is held (or, after a lost reply, may be)
			// and stays in State, so that the protocol's rollback or trim
			// sees it.
			for i := from; i < set.Len(); i++ {
				if a.State[i] != protocol.Held {
					idx = append(idx, i)
				}
			}
		}
	}
	if idx == nil {
		idx = set.All(from)
	}
	if r.Fencing {
		a.Fences = make([]int64, set.Len())
	}
	mode := "a"
	if opt.Mode == protocol.Confirm {
		mode = "c"
	}
	if opt.Mode == protocol.Prefix {
		mode = "w" // the keys before the first conflict
	}
	if r.Fencing {
		mode += "f"
	}
	sharedMode := mode[:1] // shared grants draw no fencing token
	if opt.Mode == protocol.Confirm {
		mode += ":" + opt.Ticket // its queue entries' score (acquire.lua)
		sharedMode += ":" + opt.Ticket
	}
	ttl := strconv.FormatInt(r.TTL.Milliseconds(), 10)
	jobs := kindJobs(set, idx, job{s: acquireScript, head: []string{r.Who.Holder, r.Who.Lease, ttl, mode},
		fence: r.Fencing, holds: r.Who.Lease != "", queue: mode[0] == 'c'},
		sharedAcquireScript, []string{r.Who.Holder, r.Who.Lease, ttl, sharedMode}, 0, false)
	var w *waitAfter
	if r.MinReplicas > 0 {
		w = &waitAfter{replicas: r.MinReplicas, timeout: r.ReplicaTimeout}
		a.Node = make([]string, set.Len())
	}

	for round := 0; ; round++ {
		calls, gen, err := e.plan(ctx, jobs, e.perSlot.Load())
		if err != nil {
			// A slot without a master: the map predates a failover.
			_, _ = e.topo.Refresh(ctx, gen)
			a.Err = err
			return a
		}
		res, waits := e.exec(ctx, calls, jobs, w)
		var errs []error
		stale, refused := false, false
		granted := map[string]bool{}
		for ci, res := range res {
			c := calls[ci]
			rep, err := decodeAcquire(res, len(c.idx))
			if pos, limit, ok := rediserr.LimitMismatch(err); ok && pos >= 1 && pos <= len(c.idx) {
				// Refused before any write: a permit asked for with
				// another limit than its live holders'.
				i := c.idx[pos-1]
				errs = append(errs, &protocol.LimitError{Resource: set.Keys[i].Name, Held: limit, Asked: set.Kinds[i].Limit})
				continue
			}
			if err != nil {
				ne, fr := e.classify(jobs[c.job].s, c, err)
				refused = refused || fr
				if ne.Kind == rediserr.ErrStaleTopology && !c.perSlot {
					e.markSlotMode(c.node)
				}
				if ne.Kind == rediserr.ErrUnknownOutcome {
					for _, i := range c.idx {
						a.State[i] = protocol.Unknown
					}
				}
				// A lost reply may be a dead master: its replica may have
				// taken over, and node-wide calls go to the address the
				// slot map names, so the map must be read again.
				stale = stale || ne.Kind == rediserr.ErrStaleTopology || ne.Kind == rediserr.ErrUnknownOutcome
				errs = append(errs, ne)
				continue
			}
			if !e.scriptsRun.Load() {
				e.scriptsRun.Store(true) // once: not a shared write per call
			}
			for k := range rep.granted {
				i := c.idx[k]
				a.State[i] = protocol.Held
				if r.Fencing {
					a.Fences[i] = rep.fence(k)
				}
				if a.Node != nil {
					a.Node[i] = c.node
				}
			}
			if rep.granted > 0 {
				granted[c.node] = true
			}
			for _, rc := range rep.conflicts {
				a.Conflicts = append(a.Conflicts, protocol.Conflict{Index: c.idx[rc.pos], TTL: rc.ttl, Reserved: rc.reserved})
			}
		}
		if refused && round == 0 && !anyWrittenAt(a.State, idx) {
			// The server (or a proxy) does not take the cross-slot flag:
			// nothing was written by the refused calls (keys a bare SET
			// took before them are not theirs). Go per slot, for good,
			// and try again at once (classify switched the engine).
			a.Conflicts = a.Conflicts[:0]
			continue
		}
		for node, res := range waits {
			if !granted[node] {
				continue
			}
			n, err := res.AsInt64()
			if err != nil {
				errs = append(errs, protocol.NewNodeError(node, "wait", 0, err))
			}
			if acked, short := protocol.Acked(n, err, r.MinReplicas); short {
				if a.Short == nil {
					a.Short = map[string]int{}
				}
				a.Short[node] = acked
			}
		}
		if stale {
			_, _ = e.topo.Refresh(ctx, gen)
		}
		slices.SortFunc(a.Conflicts, func(x, y protocol.Conflict) int { return x.Index - y.Index })
		a.Err = errors.Join(errs...)
		return a
	}
}

// anyWrittenAt reports whether any of the keys idx may have been written.
func anyWrittenAt(st []protocol.KeyState, idx []int) bool {
	for _, i := range idx {
		if st[i] != protocol.NotHeld {
			return true
		}
	}
	return false
}
