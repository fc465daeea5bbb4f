package batch

import (
	"context"
	"fmt"
	"slices"
	"strconv"

	"github.com/redis/rueidis"

	"github.com/slotlock/slotlock/internal/protocol"
	"github.com/slotlock/slotlock/internal/rediserr"
	"github.com/slotlock/slotlock/slot"
)

// job is one script over some keys of one set.
type job struct {
	s    *script
	set  *protocol.Set
	idx  []int    // ascending set indexes
	head []string // ARGV before the keys
	orig int      // position among the jobs of the operation
	// In slot form the script also touches these keys of the slot; they
	// are declared after the lock keys so that Redis applies its migration
	// rules to them too.
	fence bool // the slot's fencing counter
	holds bool // each lock key's hold set (reentrant leases)
	queue bool // each lock key's queue keys (waiting acquisitions, releases)
	// kind is 's' or 'p' for the shared_*.lua scripts (shared keys, or
	// permits, whose keys each carry units and limit: request_entries in
	// scripts/shared.lua), 0 otherwise. In slot form, shared keys'
	// holders sets are declared too.
	kind byte
	// nodeHead, when set, gives the head of the calls to one node (a
	// waiter's inbox differs per node); head is then unused.
	nodeHead func(node string) []string
}

// permitArgs returns the units and limit of permit i of a request set, as
// request_entries in scripts/shared.lua reads them.
func permitArgs(set *protocol.Set, i int) (units, limit string) {
	e := set.Kinds[i]
	return strconv.FormatInt(e.Units, 10), strconv.FormatInt(e.Limit, 10)
}

// call is one script invocation: the keys of one job on one node, or on
// one slot of it.
type call struct {
	job     int
	node    string
	idx     []int
	perSlot bool
	// flagged: a per-slot call sent with allow-cross-slot-keys (the
	// server has not refused the flag), so that its publishes reach a
	// waiter's inbox.
	flagged bool
}

// MaxCallKeys bounds the keys of one script call. A node runs a script
// alone: every other client of that node waits while it runs, and the
// acquire script costs the node a few microseconds per key. Without a
// bound, locking 100,000 keys held each master for one call of 33,000
// keys, and another client's GET waited up to 213 ms (BenchmarkOthersStall;
// docs/design.md, "A bound on one call's server time"). A node's keys beyond the bound go in more calls of the
// same pipelined round trip: Redis reads a pipeline in chunks and serves
// other clients between them. Each call is all or nothing (or a prefix)
// by itself; the protocol already treats calls that succeed while others
// fail, as it does across nodes.
const MaxCallKeys = 512

// plan groups each job's keys by the master that owns their slot (and by
// slot too in per-slot mode), at most MaxCallKeys keys per call.
func (e *Engine) plan(ctx context.Context, jobs []job, perSlot bool) ([]call, uint64, error) {
	gen := e.topo.Generation()
	m, err := e.topo.Current(ctx)
	if err != nil {
		return nil, gen, err
	}
	n := len(m.Addrs)
	// Usually one call per node a job touches: sized for that, and the
	// counting sort's tables on the stack up to 16 masters (a slice made
	// with a variable length is always a heap allocation).
	calls := make([]call, 0, len(jobs)*n)
	var startBuf [17]int
	var nextBuf [16]int
	start, next := startBuf[:], nextBuf[:]
	if n > len(nextBuf) {
		start, next = make([]int, n+1), make([]int, n)
	}
	start, next = start[:n+1], next[:n]
	for ji, j := range jobs {
		// Counting sort of the indexes by owner: canonical order survives
		// inside each node.
		clear(start)
		for _, i := range j.idx {
			o := m.Owner(j.set.Keys[i].Slot)
			if o < 0 {
				return nil, gen, fmt.Errorf("%w: key %q", slot.ErrUncovered, j.set.Keys[i].Name)
			}
			start[o+1]++
		}
		for i := 1; i <= n; i++ {
			start[i] += start[i-1]
		}
		sorted := make([]int, len(j.idx))
		copy(next, start[:n])
		for _, i := range j.idx {
			o := m.Owner(j.set.Keys[i].Slot)
			sorted[next[o]] = i
			next[o]++
		}
		for o := range n {
			group := sorted[start[o]:start[o+1]]
			if len(group) == 0 {
				continue
			}
			if !perSlot && !e.inSlotMode(m.Addrs[o]) {
				for len(group) > 0 {
					n := min(len(group), MaxCallKeys)
					calls = append(calls, call{job: ji, node: m.Addrs[o], idx: group[:n]})
					group = group[n:]
				}
				continue
			}
			for a := 0; a < len(group); {
				b := a + 1
				for b < len(group) && b-a < MaxCallKeys && j.set.Keys[group[b]].Slot == j.set.Keys[group[a]].Slot {
					b++
				}
				calls = append(calls, call{job: ji, node: m.Addrs[o], idx: group[a:b], perSlot: true, flagged: !e.noFlag.Load()})
				a = b
			}
		}
	}
	return calls, gen, nil
}

// build makes the EVALSHA (or EVAL) command of one call. In node form the
// first lock key is declared (it routes the call to the node that owns it)
// and all keys travel in ARGV after head; in slot form all keys are
// declared.
func (e *Engine) build(c call, j job, eval bool) rueidis.Completed {
	b := e.client.B()
	s, set := j.s, j.set
	if j.nodeHead != nil {
		j.head = j.nodeHead(c.node)
	}
	if c.perSlot {
		keys := make([]string, 0, 2*len(c.idx)+1)
		for _, i := range c.idx {
			keys = append(keys, set.Lock[i])
		}
		if j.fence {
			keys = append(keys, set.FenceKey(c.idx[0]))
		}
		if j.holds {
			for _, i := range c.idx {
				keys = append(keys, set.HoldKey(i))
			}
		}
		if j.queue {
			for _, i := range c.idx {
				keys = append(keys, set.QueueKey(i))
			}
		}
		if j.kind == 's' {
			for _, i := range c.idx {
				keys = append(keys, set.SharedKey(i))
			}
		}
		args := make([]string, 0, len(j.head)+2)
		args = append(args, j.head...)
		args = append(args, "", strconv.Itoa(len(c.idx)))
		if j.kind == 'p' {
			for _, i := range c.idx {
				u, l := permitArgs(set, i)
				args = append(args, u, l)
			}
		}
		text, sha := s.slotText, s.slotSHA
		if c.flagged {
			// A slot's keys, declared, under the node form's flag
			// (allow-cross-slot-keys): it may publish to a channel of
			// another slot on its node (a waiter's inbox, reserve.go),
			// which the slot form's SPUBLISH may not.
			text, sha = s.nodeText, s.nodeSHA
		}
		if eval {
			return b.Eval().Script(text).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build()
		}
		return b.Evalsha().Sha1(sha).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build()
	}
	var args []string
	if j.kind == 'p' {
		args = make([]string, 0, len(j.head)+3*len(c.idx))
		args = append(args, j.head...)
		for _, i := range c.idx {
			u, l := permitArgs(set, i)
			args = append(args, set.Lock[i], u, l)
		}
	} else {
		args = make([]string, len(j.head)+len(c.idx))
		copy(args, j.head)
		for k, i := range c.idx {
			args[len(j.head)+k] = set.Lock[i]
		}
	}
	route := set.Lock[c.idx[0]]
	if eval {
		return b.Eval().Script(s.nodeText).Numkeys(1).Key(route).Arg(args...).Build()
	}
	return b.Evalsha().Sha1(s.nodeSHA).Numkeys(1).Key(route).Arg(args...).Build()
}

// classify turns a failed call's error into a NodeError of the right kind.
// It reports whether the server refused the allow-cross-slot-keys flag;
// then the engine sends calls per slot and without the flag from now on.
func (e *Engine) classify(s *script, c call, err error) (ne *protocol.NodeError, flagRefused bool) {
	ne = protocol.NewNodeError(c.node, s.name, len(c.idx), s.explainDenial(err))
	if _, ok := err.(noNodeClient); ok {
		ne.Kind = rediserr.ErrStaleTopology
	}
	flagRefused = (!c.perSlot || c.flagged) && rediserr.FlagRefused(err)
	if flagRefused {
		e.noFlag.Store(true)
		e.perSlot.Store(true)
	}
	return ne, flagRefused
}

// kindJobs splits idx (nil: every key) by kind and returns one job per kind
// that has keys, numbered (orig) from orig0: excl, given its set and
// exclusive keys, then the script shared for the shared keys and for the
// permits, each with sharedHead and its kind's letter as ARGV head. With
// always, the exclusive job is there even when the set has no keys of any
// kind to give it (an operation keeps its one result). Shared keys and
// permits have a script of their own, sent in the same pipelined round
// trip as the exclusive keys' (one more call per node that has any).
func kindJobs(set *protocol.Set, idx []int, excl job, shared *script, sharedHead []string, orig0 int, always bool) []job {
	x, sh, pm := set.Split(idx)
	var jobs []job
	if len(x) > 0 || always && len(sh)+len(pm) == 0 {
		excl.set, excl.idx, excl.orig = set, x, orig0
		jobs = append(jobs, excl)
	}
	for _, k := range []struct {
		idx  []int
		kind byte
	}{{sh, 's'}, {pm, 'p'}} {
		if len(k.idx) > 0 {
			jobs = append(jobs, job{s: shared, set: set, idx: k.idx, orig: orig0 + len(jobs), kind: k.kind,
				queue: true, head: append(slices.Clip(sharedHead), string(k.kind))})
		}
	}
	return jobs
}
