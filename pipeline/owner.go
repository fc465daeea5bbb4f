package pipeline

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"

	"github.com/redis/rueidis"

	"github.com/slotlock/slotlock/internal/lockval"
	"github.com/slotlock/slotlock/internal/protocol"
	"github.com/slotlock/slotlock/internal/rediserr"
	"github.com/slotlock/slotlock/slot"
)

// op is an owner-checked operation: delete a lock key, or give it a new
// expiry, only while it is still ours.
type op uint8

const (
	opRelease op = iota
	opExtend
)

func (o op) String() string {
	if o == opExtend {
		return "extend"
	}
	return "release"
}

// item is one lock key of an owner-checked operation.
type item struct {
	key   string
	slot  uint16
	token string
	ms    int64 // the new TTL in milliseconds (extend)
}

// outcome is what an owner-checked operation did to one key.
type outcome uint8

const (
	pending outcome = iota
	done            // deleted, or given its new expiry
	notOurs         // gone, or someone else's: lost to the lease
	failed          // an error; the key may still be ours
)

const (
	// maxStaleRetries bounds how often keys whose slot had moved are
	// planned again and resent.
	maxStaleRetries = 5
	// maxTxConns bounds the dedicated connections one operation opens to
	// one node for its transactions.
	maxTxConns = 8
	// maxAborts bounds how often one slot's transaction is retried after
	// the server aborted it because a watched key changed. A key changes
	// under us only by expiring or by a Lua waiter marking it (once), so
	// more means something else writes our lock keys.
	maxAborts = 16
)

// errKeptChanging is the error of a key whose transaction kept aborting.
var errKeptChanging = errors.New("lock key kept changing under WATCH")

// checked holds the outcome of one owner-checked operation per item.
type checked struct {
	op    op
	items []item
	out   []outcome
	errs  []error // the error of each failed item
}

// ownerChecked deletes (release) or re-expires (extend) every item whose
// value is still the item's token, with or without a waiter's mark, and
// reports per item what it did. It uses the server's conditional commands
// when it has them, else one optimistic transaction per slot; keys whose
// slot moved are planned again with a fresh slot map.
func (e *Engine) ownerChecked(ctx context.Context, o op, items []item) *checked {
	c := &checked{op: o, items: items, out: make([]outcome, len(items)), errs: make([]error, len(items))}
	todo := make([]int, len(items))
	for i := range todo {
		todo[i] = i
	}
	for round := 0; len(todo) > 0; round++ {
		gen := e.topo.Generation()
		m, err := e.topo.Current(ctx)
		if err != nil {
			for _, i := range todo {
				c.out[i], c.errs[i] = failed, err
			}
			break
		}
		ne := &nodeErrors{op: o.String()}
		rest := todo
		if f := e.cond.use(ctx, e.client, o); f != condNone {
			rest = e.conditional(ctx, c, f, todo, m, ne)
		}
		if len(rest) > 0 {
			e.watched(ctx, c, rest, m, ne)
		}
		var stale []int
		for _, i := range todo {
			var nerr *protocol.NodeError
			if c.out[i] == failed && (errors.As(c.errs[i], &nerr) && nerr.Kind == rediserr.ErrStaleTopology ||
				errors.Is(c.errs[i], slot.ErrUncovered)) {
				stale = append(stale, i)
			}
		}
		if len(stale) == 0 || round >= maxStaleRetries {
			break
		}
		if _, rerr := e.topo.Refresh(ctx, gen); rerr != nil && ctx.Err() != nil {
			break
		}
		if protocol.SleepCtx(ctx, protocol.Backoff(round)) != nil {
			break
		}
		for _, i := range stale {
			c.out[i], c.errs[i] = pending, nil
		}
		todo = stale
	}
	return c
}

// fail records that item i failed with err on node.
func (c *checked) fail(ne *nodeErrors, i int, node string, err error) {
	c.out[i], c.errs[i] = failed, ne.add(node, err)
}

// collect returns, for the items from..from+len(idx)-1 that stand for the
// set indexes idx, the indexes of keys found not ours, those that failed,
// and the errors of the failed ones, each error once.
func (c *checked) collect(from int, idx []int) protocol.OwnerResult {
	var r protocol.OwnerResult
	var errs []error
	for k, i := range idx {
		switch c.out[from+k] {
		case notOurs:
			r.Lost = append(r.Lost, i)
		case failed:
			r.Failed = append(r.Failed, i)
			if !slices.Contains(errs, c.errs[from+k]) {
				errs = append(errs, c.errs[from+k])
			}
		}
	}
	slices.Sort(r.Lost)
	slices.Sort(r.Failed)
	r.Err = errors.Join(errs...)
	return r
}

// nodeOf returns the address of the master that owns s in m, or "" when
// none does.
func nodeOf(m *slot.Map, s uint16) string {
	if o := m.Owner(s); o >= 0 {
		return m.Addrs[o]
	}
	return ""
}

// conditional runs op with the server's conditional commands, two per key
// in one DoMulti (every node in parallel): one that matches the plain token
// and one that matches the token with a waiter's mark. The two cannot both
// apply: nobody but the lease writes its token. Each command checks and
// writes in one step on the server, so no transaction is needed. It returns
// the items whose node refused the commands, for the caller to handle with
// transactions.
func (e *Engine) conditional(ctx context.Context, c *checked, f condForm, todo []int, m *slot.Map, ne *nodeErrors) (refused []int) {
	b := e.client.B()
	cmds := make(rueidis.Commands, 0, 2*len(todo))
	for _, i := range todo {
		it := c.items[i]
		for _, v := range [2]string{it.token, it.token + lockval.Mark} {
			switch {
			case c.op == opExtend:
				cmds = append(cmds, b.Arbitrary("SET").Keys(it.key).
					Args(v, "IFEQ", v, "PX", strconv.FormatInt(it.ms, 10)).Build())
			case f == condDelex:
				cmds = append(cmds, b.Delex().Key(it.key).Ifeq(v).Build())
			default:
				cmds = append(cmds, b.Delifeq().Key(it.key).Value(v).Build())
			}
		}
	}
	res := e.client.DoMulti(ctx, cmds...)
	for k, i := range todo {
		switch {
		case applied(c.op, res[2*k]), applied(c.op, res[2*k+1]):
			c.out[i] = done
		default:
			err := errors.Join(replyErr(res[2*k]), replyErr(res[2*k+1]))
			switch {
			case err == nil:
				c.out[i] = notOurs
			case rediserr.CommandRefused(err):
				e.cond.refused(c.op)
				refused = append(refused, i)
			default:
				c.fail(ne, i, nodeOf(m, c.items[i].slot), firstErr(res[2*k], res[2*k+1]))
			}
		}
	}
	return refused
}

// applied reports whether a conditional command did its write: DELEX and
// DELIFEQ reply 1, SET IFEQ replies OK (nil when the value did not match).
func applied(o op, r rueidis.RedisResult) bool {
	if o == opExtend {
		return r.Error() == nil
	}
	n, err := r.AsInt64()
	return err == nil && n == 1
}

// replyErr is r's error, nil for a nil reply.
func replyErr(r rueidis.RedisResult) error {
	if err := r.Error(); err != nil && !rediserr.IsNil(err) {
		return err
	}
	return nil
}

func firstErr(rs ...rueidis.RedisResult) error {
	for _, r := range rs {
		if err := replyErr(r); err != nil {
			return err
		}
	}
	return nil
}

// group is the keys of one slot in one optimistic transaction.
type group struct {
	slot  uint16
	items []int // into checked.items
	// Filled from the WATCH round: the items read as ours (the
	// transaction's keys).
	cand   []int
	aborts int
}

// watched runs op as optimistic transactions, one per slot: WATCH the keys,
// GET them, and for those still ours MULTI, DEL (or PEXPIRE), EXEC. Redis
// aborts the EXEC when a watched key changed after the WATCH, so a key
// that expired and was taken by someone else between the GET and the write
// is never touched; the slot is then read and tried again. A transaction
// cannot span slots in a cluster (the EXEC fails with CROSSSLOT), hence one
// per slot. A deleted key that carried a Lua waiter's mark is seen free
// at that waiter's next round (the pipeline hands nothing off).
//
// A node's slots are shared among up to maxTxConns dedicated connections
// to that node, every node in parallel. Each connection chains its
// transactions: one round trip carries the EXEC of one slot and the WATCH
// and GET of the next, so a node with s slots costs about s/maxTxConns+1
// round trips.
func (e *Engine) watched(ctx context.Context, c *checked, todo []int, m *slot.Map, ne *nodeErrors) {
	sorted := slices.Clone(todo)
	slices.SortStableFunc(sorted, func(a, b int) int { return cmp.Compare(c.items[a].slot, c.items[b].slot) })
	byNode := make([][]*group, len(m.Addrs))
	for a := 0; a < len(sorted); {
		s := c.items[sorted[a]].slot
		b := a + 1
		for b < len(sorted) && c.items[sorted[b]].slot == s {
			b++
		}
		if o := m.Owner(s); o < 0 {
			for _, i := range sorted[a:b] {
				c.out[i], c.errs[i] = failed, fmt.Errorf("%w: slot %d", slot.ErrUncovered, s)
			}
		} else {
			byNode[o] = append(byNode[o], &group{slot: s, items: sorted[a:b]})
		}
		a = b
	}

	nodes := e.client.Nodes()
	var wg sync.WaitGroup
	for o, groups := range byNode {
		if len(groups) == 0 {
			continue
		}
		addr := m.Addrs[o]
		q := &groupQueue{groups: groups}
		nc := nodes[addr]
		for range min(len(groups), maxTxConns) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if nc != nil {
					// A node's own client: one dedicated connection may
					// carry transactions of all its slots in turn.
					_ = nc.Dedicated(func(d rueidis.DedicatedClient) error {
						(&txWorker{c: c, ne: ne, node: addr, src: q.next}).run(ctx, d)
						return nil
					})
					return
				}
				// The cluster client announces the node under another
				// name: its dedicated connections are pinned to one slot
				// each, so one per group.
				for g := q.next(); g != nil; g = q.next() {
					one := &groupQueue{groups: []*group{g}}
					_ = e.client.Dedicated(func(d rueidis.DedicatedClient) error {
						(&txWorker{c: c, ne: ne, node: addr, src: one.next}).run(ctx, d)
						return nil
					})
				}
			}()
		}
	}
	wg.Wait()
}

// groupQueue hands a node's groups to its connections.
type groupQueue struct {
	mu     sync.Mutex
	groups []*group
}

func (q *groupQueue) next() *group {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.groups) == 0 {
		return nil
	}
	g := q.groups[0]
	q.groups = q.groups[1:]
	return g
}

// txWorker runs groups of one node, in turn, on one dedicated connection.
type txWorker struct {
	c       *checked
	ne      *nodeErrors
	node    string
	src     func() *group
	requeue []*group // aborted transactions, to run again
}

func (w *txWorker) next() *group {
	if len(w.requeue) > 0 {
		g := w.requeue[0]
		w.requeue = w.requeue[1:]
		return g
	}
	return w.src()
}

// run chains the transactions of its groups: each round trip closes the
// previous group (its MULTI..EXEC, or UNWATCH when none of its keys was
// ours) and opens the next (WATCH and GET). The connection goes back to
// the pool with nothing watched and no transaction open; if a reply is
// lost its state is unknown, so it is closed instead.
func (w *txWorker) run(ctx context.Context, d rueidis.DedicatedClient) {
	b := d.B()
	var closing *group
	var closeCmds rueidis.Commands
	cur := w.next()
	for closing != nil || cur != nil {
		if err := ctx.Err(); err != nil && closing == nil {
			// Nothing watched yet: the connection is clean, keep it.
			w.failAll(cur.items, err)
			for g := w.next(); g != nil; g = w.next() {
				w.failAll(g.items, err)
			}
			return
		}
		nClose := len(closeCmds)
		cmds := closeCmds
		if cur != nil {
			cmds = append(cmds, b.Watch().Key(w.keys(cur)...).Build())
			for _, i := range cur.items {
				cmds = append(cmds, b.Get().Key(w.c.items[i].key).Build())
			}
		}
		res := d.DoMulti(ctx, cmds...)
		if err := transportErr(res); err != nil {
			d.Close()
			if closing != nil {
				w.failAll(closing.cand, err) // the EXEC may have run
			}
			if cur != nil {
				w.failAll(cur.items, err)
			}
			for g := w.next(); g != nil; g = w.next() {
				w.failAll(g.items, err)
			}
			return
		}
		if closing != nil {
			w.closed(closing, res[:nClose])
		}
		closing, closeCmds = nil, nil
		if cur != nil {
			closeCmds = w.read(b, cur, res[nClose:])
			closing = cur
		}
		cur = w.next()
	}
}

func (w *txWorker) keys(g *group) []string {
	keys := make([]string, len(g.items))
	for k, i := range g.items {
		keys[k] = w.c.items[i].key
	}
	return keys
}

func (w *txWorker) failAll(items []int, err error) {
	for _, i := range items {
		w.c.fail(w.ne, i, w.node, err)
	}
}

// transportErr returns the first error of res that is not a Redis reply:
// the connection failed or the context ended.
func transportErr(res []rueidis.RedisResult) error {
	for _, r := range res {
		if err := r.Error(); rediserr.Lost(err) {
			return err
		}
	}
	return nil
}

// read looks at the WATCH and GET replies of g and returns the commands
// that close it: the transaction over the keys still ours, or UNWATCH.
func (w *txWorker) read(b rueidis.Builder, g *group, res []rueidis.RedisResult) rueidis.Commands {
	unwatch := rueidis.Commands{b.Unwatch().Build()}
	if err := res[0].Error(); err != nil {
		// WATCH refused: MOVED after a reshard, an ACL...
		g.cand = nil
		w.failAll(g.items, err)
		return unwatch
	}
	g.cand = g.cand[:0]
	for k, i := range g.items {
		v, err := res[1+k].ToString()
		switch {
		case err == nil && lockval.OfPlain(v, w.c.items[i].token):
			g.cand = append(g.cand, i)
		case err == nil || rediserr.IsNil(err):
			w.c.out[i] = notOurs
		case rediserr.Kind(err) == rediserr.ErrRedis:
			w.c.out[i] = notOurs // not a string: not a lock of ours
		default:
			w.c.fail(w.ne, i, w.node, err)
		}
	}
	if len(g.cand) == 0 {
		return unwatch
	}
	cmds := make(rueidis.Commands, 0, 2*len(g.cand)+2)
	cmds = append(cmds, b.Multi().Build())
	for _, i := range g.cand {
		it := w.c.items[i]
		if w.c.op == opExtend {
			cmds = append(cmds, b.Pexpire().Key(it.key).Milliseconds(it.ms).Build())
		} else {
			cmds = append(cmds, b.Del().Key(it.key).Build())
		}
	}
	return append(cmds, b.Exec().Build())
}

// closed reads the replies of g's transaction (MULTI, queued commands,
// EXEC), or of its UNWATCH.
func (w *txWorker) closed(g *group, res []rueidis.RedisResult) {
	if len(g.cand) == 0 {
		return
	}
	exec := res[len(res)-1]
	err := exec.Error()
	if err != nil && !rediserr.IsNil(err) {
		// A queued command's own error (MOVED, say) explains the
		// EXECABORT better than the EXEC does.
		for _, r := range res[:len(res)-1] {
			if qerr := r.Error(); qerr != nil {
				err = qerr
				break
			}
		}
		w.failAll(g.cand, err)
		return
	}
	if rediserr.IsNil(err) {
		// Aborted: a watched key changed after it was read (it expired,
		// or a Lua waiter marked it). Read it again.
		g.aborts++
		if g.aborts > maxAborts {
			w.failAll(g.cand, errKeptChanging)
			return
		}
		w.requeue = append(w.requeue, &group{slot: g.slot, items: slices.Clone(g.cand), aborts: g.aborts})
		return
	}
	replies, err := exec.ToArray()
	if err != nil || len(replies) < len(g.cand) {
		w.failAll(g.cand, fmt.Errorf("malformed EXEC reply: %v", err))
		return
	}
	for k, i := range g.cand {
		if n, err := replies[k].AsInt64(); err == nil && n == 1 {
			w.c.out[i] = done
		} else {
			w.c.out[i] = notOurs
		}
	}
}
