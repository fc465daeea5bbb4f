package batch

import (
	"context"
	"slices"
	"time"

	"github.com/redis/rueidis"

	"github.com/slotlock/slotlock/internal/rediserr"
)

// waitAfter asks exec to follow each node's calls with
// WAIT replicas timeout, on the same connection.
type waitAfter struct {
	replicas int
	timeout  time.Duration
}

// nodeRun is the part of one operation that goes to one node.
type nodeRun struct {
	node  string
	calls []int // indexes into the operation's calls
	// direct: the calls go through the node's own client, which never
	// follows MOVED or ASK. A call that covers a whole node declares only
	// its routing key; followed to another node (ASK during a migration),
	// it would read the keys it did not declare there, where they may be
	// absent though held on the source, and grant them twice. Unfollowed,
	// the redirection comes back as an error (nothing ran), and the node's
	// keys are resent one call per slot, with every key declared, which is
	// where Redis enforces the migration rules (TRYAGAIN while a slot's keys
	// are split).
	direct rueidis.Client
	// pinned: the run goes through direct (nil: rueidis has no client for
	// the node yet), because some call covers the whole node, or because
	// the run ends with a WAIT. A WAIT counts the replicas that have the
	// writes of its own connection: a script that the cluster client
	// followed to another node (MOVED, ASK) would not be covered by the
	// WAIT the first node answers, and rueidis v1.0.79 panics in DoMulti
	// (index out of range in clusterClient.doresultfn) when it retries such
	// a run while slots move (docs/faults.md, "The soak"). Unfollowed, a
	// redirection is an error reply: nothing ran, the keys are planned
	// again on a fresh slot map.
	pinned bool
}

// nodeResult is what one node's goroutine sends back.
type nodeResult struct {
	run   int
	res   []rueidis.RedisResult // one per call of the run
	wait  rueidis.RedisResult
	hasWt bool
}

// exec runs the calls of one operation: each node's calls pipelined in one
// DoMulti, every node in its own goroutine. A node's goroutine resends its
// NOSCRIPT replies as EVAL at once (a cold script cache, as after a
// failover, costs that node one more round trip and nobody else anything).
// exec returns when every node answered or ctx ended; a node that has not
// answered by then (a paused node, or rueidis waiting for a redial that
// does not watch the caller's context) gets ErrUnknownOutcome for its
// calls, and its goroutine finishes in the background, its result
// discarded. With w, each node's calls are followed by a WAIT on the same
// connection; its reply comes back keyed by node address.
func (e *Engine) exec(ctx context.Context, calls []call, jobs []job, w *waitAfter) ([]rueidis.RedisResult, map[string]rueidis.RedisResult) {
	runs := e.groupRuns(calls, w != nil)
	out := make([]rueidis.RedisResult, len(calls))
	var waits map[string]rueidis.RedisResult
	if w != nil {
		waits = make(map[string]rueidis.RedisResult, len(runs))
	}
	if len(runs) == 1 && !e.isTroubled(runs[0].node) {
		// One node, healthy as far as we know: call it from this
		// goroutine. Handing the call to another goroutine and back costs
		// two scheduler wake-ups (a single-key lock and release took 235
		// instead of 150 µs; BenchmarkOneKey/goroutines=1). rueidis honours ctx on
		// a live connection; the one wait it does not bound by ctx is for
		// a redial in progress, which follows a failed call: the node is
		// then troubled and takes the goroutine path below for a while.
		r := e.runNode(ctx, 0, runs[0], calls, jobs, w)
		for k, ci := range runs[0].calls {
			out[ci] = r.res[k]
		}
		if r.hasWt {
			waits[runs[0].node] = r.wait
		}
		return out, waits
	}
	results := make(chan nodeResult, len(runs)) // never blocks a late sender
	for i := range runs {
		e.workers.do(func() { results <- e.runNode(ctx, i, runs[i], calls, jobs, w) })
	}
	var gotBuf [16]bool
	got := gotBuf[:0]
	got = append(got, make([]bool, len(runs))...) // on the stack up to 16 nodes
	for range runs {
		select {
		case r := <-results:
			got[r.run] = true
			for k, ci := range runs[r.run].calls {
				out[ci] = r.res[k]
			}
			if r.hasWt {
				waits[runs[r.run].node] = r.wait
			}
		case <-ctx.Done():
			err := context.Cause(ctx)
			for ri, run := range runs {
				if got[ri] {
					continue
				}
				for _, ci := range run.calls {
					out[ci] = rueidis.NewErrorResult(err)
				}
				if w != nil {
					waits[run.node] = rueidis.NewErrorResult(err)
				}
			}
			return out, waits
		}
	}
	return out, waits
}

// groupRuns splits calls by node, keeping their order; runs with node-wide
// calls, and every run when pin is set (a WAIT follows), get the node's own
// client. An operation reaches a few nodes: they are found by a linear
// search (the slot map's own count bounds it), and every run's calls
// share one backing array, where a map and a slice per run were about a
// sixth of the release path's own CPU at K = 100 (docs/benchmarks.md).
func (e *Engine) groupRuns(calls []call, pin bool) []nodeRun {
	runs := make([]nodeRun, 0, min(len(calls), 8))
	var ofBuf [64]int
	var cntBuf [16]int
	of, cnt := ofBuf[:0], cntBuf[:0] // of[ci]: the run of call ci; cnt[ri]: its calls
	for _, c := range calls {
		ri := slices.IndexFunc(runs, func(r nodeRun) bool { return r.node == c.node })
		if ri < 0 {
			ri = len(runs)
			runs = append(runs, nodeRun{node: c.node})
			cnt = append(cnt, 0)
		}
		of = append(of, ri)
		cnt[ri]++
	}
	backing := make([]int, len(calls))
	at := 0
	for ri := range runs {
		runs[ri].calls = backing[at : at : at+cnt[ri]]
		at += cnt[ri]
	}
	for ci, c := range calls {
		ri := of[ci]
		runs[ri].calls = append(runs[ri].calls, ci)
		if (pin || !c.perSlot) && !runs[ri].pinned {
			runs[ri].pinned = true
			runs[ri].direct = e.nodeClient(c.node)
		}
	}
	return runs
}

// nodeClient returns the client of one cluster node that sends commands to
// that node only. On a standalone deployment the client itself is that.
func (e *Engine) nodeClient(addr string) rueidis.Client {
	if e.client.Mode() != rueidis.ClientModeCluster {
		return e.client
	}
	e.nodesMu.Lock()
	defer e.nodesMu.Unlock()
	if c, ok := e.nodes[addr]; ok && e.nodesGen == e.topo.Generation() {
		return c
	}
	e.nodesGen = e.topo.Generation()
	// rueidis names nodes by the address the cluster announces, as the
	// slot map does; a node it has just learnt of appears here on its next
	// refresh.
	e.nodes = e.client.Nodes()
	return e.nodes[addr] // nil: runNode reports the node unreachable
}

// troubleFor is how long a node that failed a call stays troubled: longer
// than rueidis takes to give up a dial (its dial timeout, 5 s by default)
// and to refresh its slot map after a failover.
const troubleFor = 15 * time.Second

// trouble marks node as troubled for troubleFor.
func (e *Engine) trouble(node string) {
	e.nodesMu.Lock()
	defer e.nodesMu.Unlock()
	if e.troubled == nil {
		e.troubled = make(map[string]time.Time)
	}
	e.troubled[node] = time.Now().Add(troubleFor)
}

// isTroubled reports whether node failed a call within troubleFor.
func (e *Engine) isTroubled(node string) bool {
	e.nodesMu.Lock()
	defer e.nodesMu.Unlock()
	until, ok := e.troubled[node]
	if ok && time.Now().After(until) {
		delete(e.troubled, node)
		return false
	}
	return ok
}

// forgetNode drops the cached client of a node, so that the next call takes
// the one rueidis has now.
func (e *Engine) forgetNode(addr string) {
	e.nodesMu.Lock()
	delete(e.nodes, addr)
	e.nodesMu.Unlock()
}

func (e *Engine) runNode(ctx context.Context, ri int, run nodeRun, calls []call, jobs []job, w *waitAfter) nodeResult {
	r := nodeResult{run: ri, res: make([]rueidis.RedisResult, len(run.calls))}
	client := e.client
	direct := run.pinned
	if direct {
		if run.direct == nil {
			for k := range r.res {
				r.res[k] = rueidis.NewErrorResult(errNoNodeClient(run.node))
			}
			return r
		}
		client = run.direct
	}
	// build makes the commands of the run's calls which (nil: all).
	build := func(eval bool, which []int) rueidis.Commands {
		n := len(which)
		if which == nil {
			n = len(run.calls)
		}
		cmds := make(rueidis.Commands, 0, n+1)
		last := -1
		for j := range n {
			k := j
			if which != nil {
				k = which[j]
			}
			c := calls[run.calls[k]]
			cmds = append(cmds, e.build(c, jobs[c.job], eval))
			last = run.calls[k]
		}
		if w != nil {
			c := calls[last]
			cmds = append(cmds, e.waitCmd(w, jobs[c.job].set.Lock[c.idx[0]]))
		}
		return cmds
	}
	res := client.DoMulti(ctx, build(false, nil)...)
	copy(r.res, res[:len(run.calls)])
	for _, x := range res {
		if rediserr.Lost(x.Error()) {
			e.trouble(run.node)
			if direct {
				// rueidis may have closed this connection and dialled a
				// new one (after an error, a failover, a refresh): the
				// client taken from Nodes() keeps the old one. Take it
				// afresh.
				e.forgetNode(run.node)
			}
			break
		}
	}
	if w != nil {
		r.wait, r.hasWt = res[len(run.calls)], true
	}
	var again []int
	for k, x := range r.res {
		if rediserr.IsNoScript(x.Error()) {
			again = append(again, k)
		}
	}
	if len(again) == 0 {
		return r
	}
	// The first WAIT ran before these scripts and says nothing of them;
	// the resend carries its own.
	res = client.DoMulti(ctx, build(true, again)...)
	for j, k := range again {
		r.res[k] = res[j]
	}
	if w != nil {
		r.wait = res[len(again)]
	}
	return r
}

// waitCmd is WAIT pinned to the node that owns route's slot.
func (e *Engine) waitCmd(w *waitAfter, route string) rueidis.Completed {
	return e.client.B().Wait().Numreplicas(int64(w.replicas)).
		Timeout(w.timeout.Milliseconds()).Build().SetSlot(route)
}

// noNodeClient reports a node of the slot map that rueidis has no
// connection for yet: nothing was sent; the slot map is refreshed and the
// call planned again.
type noNodeClient struct{ node string }

func (e noNodeClient) Error() string {
	return "no connection to node " + e.node + " (not in the client's topology yet)"
}

func errNoNodeClient(node string) error { return noNodeClient{node} }
