package batch

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"

	"github.com/slotlock/slotlock/internal/topology"
	"github.com/slotlock/slotlock/slot"
)

// Options tune an Engine. The zero value is the default: one script call per
// node where the server allows it.
type Options struct {
	// PerSlot forces one script call per slot, as on servers (or proxies)
	// that refuse the allow-cross-slot-keys flag. The engine also switches
	// to it by itself when the server refuses the flag.
	PerSlot bool
}

// Engine runs acquire, extend, release and guard scripts over the keys of
// Sets: one pipelined round trip per operation, every node in parallel.
type Engine struct {
	client  rueidis.Client
	topo    *topology.Source
	perSlot atomic.Bool

	// slotMode lists nodes that get one call per slot for a while: a
	// node-wide call fails as a whole when any of its keys is in a slot
	// being migrated, while per-slot calls confine the failure (and
	// rueidis's ASK handling) to that slot.
	slotModeMu sync.Mutex
	slotMode   map[string]time.Time

	nodesMu  sync.Mutex
	nodes    map[string]rueidis.Client // per-node clients, by address
	nodesGen uint64                    // slot map generation they were taken at
	// troubled lists nodes that recently failed a call for a reason other
	// than a Redis error (a timeout, a broken connection), until when. Calls
	// to such a node always run in a goroutine of their own; see exec.
	troubled map[string]time.Time

	// scriptsRun is set once an acquire script has run on the deployment.
	// Until then every acquisition goes through a script, with no bare
	// SET (takeBare): a server that refuses scripts must say so at the lock
	// (where an Auto Locker switches strategy, having written nothing),
	// not at the release of a key a bare SET took.
	scriptsRun atomic.Bool

	// bareSkip counts first attempts that go straight to the script
	// because a recent bare attempt met a held key (see takeBare).
	bareSkip atomic.Int32

	workers workers // the goroutines of multi-node operations
}

// slotModeSpell is how long a node stays in per-slot mode after a
// node-wide call met a moving slot: migrations of lock keys take
// milliseconds to seconds.
const slotModeSpell = 2 * time.Second

func (e *Engine) markSlotMode(node string) {
	e.slotModeMu.Lock()
	defer e.slotModeMu.Unlock()
	if e.slotMode == nil {
		e.slotMode = map[string]time.Time{}
	}
	e.slotMode[node] = time.Now().Add(slotModeSpell)
}

func (e *Engine) inSlotMode(node string) bool {
	e.slotModeMu.Lock()
	defer e.slotModeMu.Unlock()
	until, ok := e.slotMode[node]
	if ok && time.Now().After(until) {
		delete(e.slotMode, node)
		return false
	}
	return ok
}

// New returns an Engine for client, reading slot ownership from topo.
func New(client rueidis.Client, topo *topology.Source, opt Options) *Engine {
	e := &Engine{client: client, topo: topo}
	e.perSlot.Store(opt.PerSlot)
	return e
}

// Close ends the goroutines the engine keeps for its calls to nodes. Calls
// made after Close still work, on goroutines of their own.
func (e *Engine) Close() { e.workers.close() }

// PerSlot reports whether the engine makes one call per slot (true) or one
// per node.
func (e *Engine) PerSlot() bool { return e.perSlot.Load() }

// Who identifies the writer of lock keys.
type Who struct {
	// Holder is the value written into the lock keys: the lease token, or
	// the owner token that all reentrant leases of one owner share.
	Holder string
	// Lease is the lease token when Holder is an owner token (the lease
	// then joins each key's hold set), and "" otherwise.
	Lease string
}

// KeyState is what an attempt knows of one key.
type KeyState uint8

const (
	// NotHeld: the key was not taken by this attempt.
	NotHeld KeyState = iota
	// Held: the key is held by the lease.
	Held
	// Unknown: the reply was lost; the key may be held by the lease. Only
	// an owner-checked release can clean it up.
	Unknown
)

// Mode selects how an acquire attempt treats a conflict.
type Mode uint8

const (
	// AllOrNothing takes a node's keys only if none of them is held by
	// someone else, and reports the conflicts it found.
	AllOrNothing Mode = iota
	// Prefix takes, on each node, the keys before the first conflict in
	// canonical order and marks the conflicting key so that its release
	// publishes a wake-up. Lock uses it to keep a canonical prefix while it
	// waits: that ordering is what rules out deadlock.
	Prefix
)

// AcquireOptions are the per-attempt settings.
type AcquireOptions struct {
	Mode Mode
	// Fencing makes every newly granted key take a fencing token from its
	// slot's counter.
	Fencing bool
	// MinReplicas, when above zero, sends WAIT MinReplicas ReplicaTimeout
	// to every node right after its scripts, on the same connection, and
	// reports nodes whose replicas acknowledged fewer writes.
	MinReplicas    int
	ReplicaTimeout time.Duration
	// First marks an acquisition's first attempt: the lease holds nothing
	// yet, so a plain one may take its keys with bare SET NX commands
	// before any script runs (takeBare).
	First bool
}

// Conflict is a key held by another lease.
type Conflict struct {
	Index int           // into Set.Keys
	TTL   time.Duration // remaining life of the other holder's lock; -1 means none
}

// ReplicaShortfall is a node whose replicas did not acknowledge the
// attempt's writes in time.
type ReplicaShortfall struct {
	Node  string
	Acked int
}

// Attempt is the outcome of one acquire attempt.
type Attempt struct {
	// State has one entry per key of the set; keys below the attempt's
	// start keep NotHeld.
	State []KeyState
	// Fences holds, with AcquireOptions.Fencing, the fencing token of
	// every Held key (zero elsewhere).
	Fences    []int64
	Conflicts []Conflict // ascending Index
	// Replicas lists nodes whose WAIT came back short.
	Replicas []ReplicaShortfall
	// Err joins the NodeErrors of calls that failed other than by
	// conflict. Calls failing with ErrStaleTopology wrote nothing; the
	// engine has already refreshed its slot map.
	Err error
}

// FirstFailure returns the smallest index at or after from whose key is not
// Held, or len(State) when every key from `from` on is held.
func (a *Attempt) FirstFailure(from int) int {
	for i := from; i < len(a.State); i++ {
		if a.State[i] != Held {
			return i
		}
	}
	return len(a.State)
}

// job is one script over some keys of one set.
type job struct {
	s    *script
	set  *Set
	idx  []int    // ascending set indexes
	head []string // ARGV before the keys
	orig int      // position among the jobs of the operation
	// In slot form the script also touches these keys of the slot; they
	// are declared after the lock keys so that Redis applies its migration
	// rules to them too.
	fence bool // the slot's fencing counter
	holds bool // each lock key's hold set (reentrant leases)
}

// call is one script invocation: the keys of one job on one node, or on
// one slot of it.
type call struct {
	job     int
	node    string
	idx     []int
	perSlot bool
}

// plan groups each job's keys by the master that owns their slot, and by
// slot too in per-slot mode.
func (e *Engine) plan(ctx context.Context, jobs []job, perSlot bool) ([]call, uint64, error) {
	gen := e.topo.Generation()
	m, err := e.topo.Current(ctx)
	if err != nil {
		return nil, gen, err
	}
	n := len(m.Addrs)
	var calls []call
	start := make([]int, n+1)
	next := make([]int, n)
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
				calls = append(calls, call{job: ji, node: m.Addrs[o], idx: group})
				continue
			}
			for a := 0; a < len(group); {
				b := a + 1
				for b < len(group) && j.set.Keys[group[b]].Slot == j.set.Keys[group[a]].Slot {
					b++
				}
				calls = append(calls, call{job: ji, node: m.Addrs[o], idx: group[a:b], perSlot: true})
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
	if c.perSlot {
		keys := make([]string, 0, 2*len(c.idx)+1)
		for _, i := range c.idx {
			keys = append(keys, set.Lock[i])
		}
		if j.fence {
			keys = append(keys, set.fenceKey(c.idx[0]))
		}
		if j.holds {
			for _, i := range c.idx {
				keys = append(keys, set.holdKey(i))
			}
		}
		args := make([]string, 0, len(j.head)+2)
		args = append(args, j.head...)
		args = append(args, "", strconv.Itoa(len(c.idx)))
		if eval {
			return b.Eval().Script(s.slotText).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build()
		}
		return b.Evalsha().Sha1(s.slotSHA).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build()
	}
	args := make([]string, len(j.head)+len(c.idx))
	copy(args, j.head)
	for k, i := range c.idx {
		args[len(j.head)+k] = set.Lock[i]
	}
	route := set.Lock[c.idx[0]]
	if eval {
		return b.Eval().Script(s.nodeText).Numkeys(1).Key(route).Arg(args...).Build()
	}
	return b.Evalsha().Sha1(s.nodeSHA).Numkeys(1).Key(route).Arg(args...).Build()
}

// classify turns a failed call's error into a NodeError of the right kind.
// It reports whether the server refused the allow-cross-slot-keys flag.
func classify(s *script, c call, err error) (ne *NodeError, flagRefused bool) {
	ne = &NodeError{Node: c.node, Script: s.name, Keys: len(c.idx), Err: err}
	switch _, isRedis := rueidis.IsRedisErr(err); {
	case errors.As(err, new(noNodeClient)):
		ne.Kind = ErrStaleTopology
	case !isRedis:
		ne.Kind = ErrUnknownOutcome
	case topology.IsStale(err):
		ne.Kind = ErrStaleTopology
	default:
		ne.Kind = ErrRedis
		// Redis 7 answers "Unexpected flag in script shebang" to a flag it
		// does not know; proxies that parse scripts say "shebang" too.
		flagRefused = !c.perSlot && strings.Contains(err.Error(), "shebang")
	}
	return ne, flagRefused
}

// maxStaleRetries bounds how often release and extend re-plan calls that
// reached a node which no longer owned their slots.
const maxStaleRetries = 5

func allIndexes(n, from int) []int {
	idx := make([]int, 0, n-from)
	for i := from; i < n; i++ {
		idx = append(idx, i)
	}
	return idx
}

// Acquire makes one attempt to take keys from..Len()-1 of set for who.
// Every node's call takes all its keys or none (see acquire.lua); the calls of
// all nodes go out in one pipelined round trip.
func (e *Engine) Acquire(ctx context.Context, set *Set, from int, who Who, ttl time.Duration, opt AcquireOptions) Attempt {
	a := Attempt{State: make([]KeyState, set.Len())}
	var idx []int
	if e.bareFits(set.Len()-from, who, opt) {
		if taken, tried := e.takeBare(ctx, set, from, who, ttl, a.State); taken {
			return a
		} else if tried {
			// The script goes on with the keys the bare commands did not
			// get; what they got is held (or, after a lost reply, may be)
			// and stays in State, so that the caller's rollback or trim
			// sees it.
			for i := from; i < set.Len(); i++ {
				if a.State[i] != Held {
					idx = append(idx, i)
				}
			}
		}
	}
	if idx == nil {
		idx = allIndexes(set.Len(), from)
	}
	if opt.Fencing {
		a.Fences = make([]int64, set.Len())
	}
	mode := "a"
	if opt.Mode == Prefix {
		mode = "w"
	}
	if opt.Fencing {
		mode += "f"
	}
	jobs := []job{{s: acquireScript, set: set, idx: idx,
		head:  []string{who.Holder, who.Lease, strconv.FormatInt(ttl.Milliseconds(), 10), mode},
		fence: opt.Fencing, holds: who.Lease != ""}}
	var w *waitAfter
	if opt.MinReplicas > 0 {
		w = &waitAfter{replicas: opt.MinReplicas, timeout: opt.ReplicaTimeout}
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
		for ci, r := range res {
			c := calls[ci]
			vals, err := r.AsIntSlice()
			if err == nil && (len(vals) < 2 || int(vals[1])*2+2 > len(vals)) {
				err = fmt.Errorf("malformed acquire reply %v", vals)
			}
			if err != nil {
				ne, fr := classify(acquireScript, c, err)
				refused = refused || fr
				if errors.Is(ne.Kind, ErrStaleTopology) && !c.perSlot {
					e.markSlotMode(c.node)
				}
				if errors.Is(ne.Kind, ErrUnknownOutcome) {
					for _, i := range c.idx {
						a.State[i] = Unknown
					}
				}
				// A lost reply may be a dead master: its replica may have
				// taken over, and node-wide calls go to the address the
				// slot map names, so the map must be read again.
				stale = stale || errors.Is(ne.Kind, ErrStaleTopology) || errors.Is(ne.Kind, ErrUnknownOutcome)
				errs = append(errs, ne)
				continue
			}
			if !e.scriptsRun.Load() {
				e.scriptsRun.Store(true) // once: not a shared write per call
			}
			n, nc := int(vals[0]), int(vals[1])
			for k := 0; k < n && k < len(c.idx); k++ {
				a.State[c.idx[k]] = Held
				if opt.Fencing && 2+2*nc+k < len(vals) {
					a.Fences[c.idx[k]] = vals[2+2*nc+k]
				}
			}
			if n > 0 {
				granted[c.node] = true
			}
			for k := range nc {
				pos, pttl := int(vals[2+2*k])-1, vals[3+2*k]
				if pos < 0 || pos >= len(c.idx) {
					continue
				}
				d := time.Duration(pttl) * time.Millisecond
				if pttl < 0 {
					d = -1
				}
				a.Conflicts = append(a.Conflicts, Conflict{Index: c.idx[pos], TTL: d})
			}
		}
		if refused && round == 0 && !anyWrittenAt(a.State, idx) {
			// The server (or a proxy) does not take the cross-slot flag:
			// nothing was written by the refused calls (keys a bare SET
			// took before them are not theirs). Go per slot, for good,
			// and try again at once.
			e.perSlot.Store(true)
			a.Conflicts = a.Conflicts[:0]
			continue
		}
		if refused {
			e.perSlot.Store(true)
		}
		for node, r := range waits {
			if !granted[node] {
				continue
			}
			acked, err := r.AsInt64()
			if err != nil {
				errs = append(errs, &NodeError{Node: node, Script: "wait", Kind: ErrUnknownOutcome, Err: err})
				acked = 0
			}
			if int(acked) < opt.MinReplicas {
				a.Replicas = append(a.Replicas, ReplicaShortfall{Node: node, Acked: int(acked)})
			}
		}
		if stale {
			_, _ = e.topo.Refresh(ctx, gen)
		}
		slices.SortFunc(a.Conflicts, func(x, y Conflict) int { return x.Index - y.Index })
		slices.SortFunc(a.Replicas, func(x, y ReplicaShortfall) int { return strings.Compare(x.Node, y.Node) })
		a.Err = errors.Join(errs...)
		return a
	}
}

// BareMax is the largest batch that takeBare takes. A bare
// SET costs the client a command of its own to build, send and read back,
// where the script takes all of a node's keys in one call; the script
// costs its master about a microsecond more per key. Above this bound the
// client's extra CPU grew to 0.4-0.8 ms per 1,000-key batch for no gain in
// batches/s on this project's 2-core machine (docs/design.md).
const BareMax = 256

// bareSkipAfterMiss is how many first attempts skip takeBare after one
// met a held key: where batches collide in Redis (several processes on
// the same keys), a bare attempt that fails costs a round trip more than
// the script alone, and its partial holds get in others' way until the
// script's answer trims them.
const bareSkipAfterMiss = 8

// bareFits reports whether an attempt over n keys may use takeBare: a
// plain lease (no fencing token to draw, no hold set to join, no replicas
// to wait for) of at most BareMax keys, on a deployment where an acquire
// script has already run (a server that refuses scripts must say so at
// the lock, where an Auto Locker switches strategy having written
// nothing, not at the release of keys a bare SET took). One key is tried
// on every attempt: it cannot be half taken. More are tried on the first
// attempt only, and not while bareSkip counts down after a miss.
func (e *Engine) bareFits(n int, who Who, opt AcquireOptions) bool {
	if n < 1 || n > BareMax || who.Lease != "" || opt.Fencing || opt.MinReplicas > 0 || !e.scriptsRun.Load() {
		return false
	}
	if n == 1 {
		return true
	}
	if !opt.First {
		return false
	}
	if e.bareSkip.Load() > 0 {
		e.bareSkip.Add(-1)
		return false
	}
	return true
}

// takeBare takes keys from.. of set with SET key token NX PX ttl, bare
// commands through the cluster client, as the key's own client would send
// them, instead of a script call, which costs its master about a
// microsecond more per key (docs/benchmarks.md). One key goes in one Do;
// more in one DoMulti, which sends each node its share in parallel. The
// cluster client follows MOVED and ASK per command: safe for a one-key
// command (a source node answers ASK only for a key it does not have).
//
// It writes the outcome into st: Held for an OK, NotHeld for a key found
// held (a nil reply) or a Redis error (nothing written), Unknown for a
// lost reply (the SET may have landed; the node is marked troubled). It
// reports whether every key was taken, and whether it sent anything at
// all: not when the slot map is unreadable, a slot has no master, or one
// of the masters failed a call lately (the cluster client may then wait
// for a redial beyond ctx, and the general path's calls do not; see
// exec).
//
// Unlike the script, the bare commands are not all or nothing: on a held
// key the others stay taken. Acquire then runs the script on the keys not
// taken, which decides for them as if from the start (a key holding the
// lease's own token counts as taken, so a SET that landed although its
// reply was lost is found there), and keeps what the bare commands took
// in State: Lock gives back what lies above the first key it could not
// get, TryLock gives back everything, as after any partial attempt. Other
// batches may see those keys held for that round trip, no longer. A miss
// over several keys makes the next bareSkipAfterMiss first attempts go
// straight to the script.
func (e *Engine) takeBare(ctx context.Context, set *Set, from int, who Who, ttl time.Duration, st []KeyState) (taken, tried bool) {
	m, err := e.topo.Current(ctx)
	if err != nil {
		return false, false
	}
	var seenBuf [8]int
	seen := seenBuf[:0] // masters already checked
	for i := from; i < set.Len(); i++ {
		o := m.Owner(set.Keys[i].Slot)
		if o < 0 {
			return false, false
		}
		if !slices.Contains(seen, o) {
			if e.isTroubled(m.Addrs[o]) {
				return false, false
			}
			seen = append(seen, o)
		}
	}
	// Arbitrary with the TTL formatted once: see BenchmarkBareSetBuild.
	px := strconv.FormatInt(ttl.Milliseconds(), 10)
	set1 := func(i int) rueidis.Completed {
		return e.client.B().Arbitrary("SET").Keys(set.Lock[i]).Args(who.Holder, "NX", "PX", px).Build()
	}
	taken = true
	note := func(i int, r rueidis.RedisResult) {
		switch {
		case r.Error() == nil:
			st[i] = Held
		case r.NonRedisError() != nil:
			st[i] = Unknown
			e.trouble(m.Addrs[m.Owner(set.Keys[i].Slot)])
			taken = false
		default: // nil (held) or an error reply: nothing written
			taken = false
		}
	}
	if set.Len()-from == 1 {
		note(from, e.client.Do(ctx, set1(from)))
		return taken, true
	}
	cmds := make(rueidis.Commands, 0, set.Len()-from)
	for i := from; i < set.Len(); i++ {
		cmds = append(cmds, set1(i))
	}
	for k, r := range e.client.DoMulti(ctx, cmds...) {
		note(from+k, r)
	}
	if !taken {
		e.bareSkip.Store(bareSkipAfterMiss)
	}
	return taken, true
}

// oneKeyNode returns the master of key i for a one-key command through the
// cluster client (releaseOne), and false when the slot map is
// unreadable, the slot has no master, or the master failed a call lately:
// the general path then runs, whose calls to such a node do not block the
// caller beyond ctx (see exec).
func (e *Engine) oneKeyNode(ctx context.Context, set *Set, i int) (string, bool) {
	m, err := e.topo.Current(ctx)
	if err != nil {
		return "", false
	}
	o := m.Owner(set.Keys[i].Slot)
	if o < 0 || e.isTroubled(m.Addrs[o]) {
		return "", false
	}
	return m.Addrs[o], true
}

// oneKeyErr marks node troubled when err is not a Redis reply (a lost
// reply, a broken connection), as exec does, and returns err. A nil reply
// is a reply: rueidis.IsRedisErr says false for it.
func (e *Engine) oneKeyErr(node string, err error) error {
	if _, isRedis := rueidis.IsRedisErr(err); err != nil && !isRedis && !rueidis.IsRedisNil(err) {
		e.trouble(node)
	}
	return err
}

// releaseOne releases one plain lock key (no hold set) with a script of
// its own (release1.lua), sent through the cluster client like takeBare:
// it declares its one key, so following MOVED or ASK is safe. A Redis
// error means the script did not delete (it fails before, or not at all),
// so the general path runs instead (done false) and classifies it; a lost
// reply is reported as such, as the general path would: the key may be
// gone.
func (e *Engine) releaseOne(ctx context.Context, set *Set, i int, who Who) (lost []int, done bool, err error) {
	node, ok := e.oneKeyNode(ctx, set, i)
	if !ok {
		return nil, false, nil
	}
	n, err := release1Script.Exec(ctx, e.client, []string{set.Lock[i]}, []string{who.Holder}).AsInt64()
	if err = e.oneKeyErr(node, err); err != nil {
		if _, isRedis := rueidis.IsRedisErr(err); isRedis {
			return nil, false, nil
		}
		return nil, true, &NodeError{Node: node, Script: "release", Keys: 1, Kind: ErrUnknownOutcome, Err: err}
	}
	if n == 0 {
		return []int{i}, true, nil
	}
	return nil, true, nil
}

func anyWritten(st []KeyState) bool {
	for _, s := range st {
		if s != NotHeld {
			return true
		}
	}
	return false
}

// anyWrittenAt is anyWritten over the keys idx only.
func anyWrittenAt(st []KeyState, idx []int) bool {
	for _, i := range idx {
		if st[i] != NotHeld {
			return true
		}
	}
	return false
}

// OwnerResult is the outcome of an owner-checked operation on one set.
type OwnerResult struct {
	Lost []int // set indexes of keys the lease no longer held
	Err  error
}

// Release deletes, owner-checked, the lock keys idx (ascending set indexes;
// nil means all) that who still holds. It returns the indexes of keys no
// longer held (expired, taken over, deleted by an operator).
func (e *Engine) Release(ctx context.Context, set *Set, idx []int, who Who) (lost []int, err error) {
	if who.Lease == "" && (idx == nil && set.Len() == 1 || len(idx) == 1) {
		i := 0
		if idx != nil {
			i = idx[0]
		}
		if lost, done, err := e.releaseOne(ctx, set, i, who); done {
			return lost, err
		}
	}
	if idx == nil {
		idx = allIndexes(set.Len(), 0)
	}
	r := e.ownerChecked(ctx, []job{{s: releaseScript, set: set, idx: idx,
		head: []string{who.Holder, who.Lease}, holds: who.Lease != ""}}, nil)
	return r[0].Lost, r[0].Err
}

// Extend sets a new TTL on every key of set, per node all or nothing: a node
// whose keys are not all held extends none of them. It returns the indexes
// of keys no longer held.
func (e *Engine) Extend(ctx context.Context, set *Set, who Who, ttl time.Duration) (lost []int, err error) {
	r := e.ExtendMany(ctx, []ExtendJob{{Set: set, Who: who, TTL: ttl}})
	return r[0].Lost, r[0].Err
}

// ExtendJob is one lease of a batched renewal.
type ExtendJob struct {
	Set *Set
	Who Who
	TTL time.Duration
	// MinReplicas > 0 follows each node's extend scripts with WAIT, as for
	// grants: an extension the promoted replica never saw would leave the
	// key expiring earlier than the lease's deadline. A node that falls
	// short fails the extension of the leases with keys there (a
	// *ReplicaError); their deadline must stay where it was.
	MinReplicas    int
	ReplicaTimeout time.Duration
}

// ExtendMany extends many leases in one pipelined round trip per node, as
// the watchdog does every period for all the leases it keeps alive.
func (e *Engine) ExtendMany(ctx context.Context, ext []ExtendJob) []OwnerResult {
	var w *waitAfter
	for _, x := range ext {
		if x.MinReplicas > 0 && (w == nil || x.MinReplicas > w.replicas) {
			w = &waitAfter{replicas: x.MinReplicas, timeout: x.ReplicaTimeout}
		}
	}
	jobs := make([]job, len(ext))
	for i, x := range ext {
		jobs[i] = job{s: extendScript, set: x.Set, idx: allIndexes(x.Set.Len(), 0), orig: i,
			head:  []string{x.Who.Holder, x.Who.Lease, strconv.FormatInt(x.TTL.Milliseconds(), 10)},
			holds: x.Who.Lease != ""}
	}
	return e.ownerChecked(ctx, jobs, w)
}

// ownerChecked runs release or extend jobs, whose scripts return the
// positions of the keys the lease did not hold. Calls that reached a node
// which no longer serves their slots wrote nothing; they are planned again
// and resent.
func (e *Engine) ownerChecked(ctx context.Context, jobs []job, w *waitAfter) []OwnerResult {
	out := make([]OwnerResult, len(jobs))
	errs := make([][]error, len(jobs))
	pending := jobs
	for round := 0; len(pending) > 0; round++ {
		calls, gen, perr := e.plan(ctx, pending, e.perSlot.Load())
		if perr != nil {
			for _, j := range pending {
				errs[j.orig] = append(errs[j.orig], perr)
			}
			break
		}
		res, waits := e.exec(ctx, calls, pending, w)
		short := e.shortNodes(waits, w)
		lostReply := false
		retry := map[int][]int{} // job (in pending) -> indexes to resend
		for ci, r := range res {
			c := calls[ci]
			j := pending[c.job]
			k := j.orig
			pos, err := r.AsIntSlice()
			if err != nil {
				ne, refused := classify(j.s, c, err)
				if refused {
					e.perSlot.Store(true)
				}
				if errors.Is(ne.Kind, ErrStaleTopology) && !c.perSlot {
					e.markSlotMode(c.node)
				}
				lostReply = lostReply || errors.Is(ne.Kind, ErrUnknownOutcome)
				if (refused || errors.Is(ne.Kind, ErrStaleTopology)) && round < maxStaleRetries {
					retry[c.job] = append(retry[c.job], c.idx...)
				} else {
					errs[k] = append(errs[k], ne)
				}
				continue
			}
			for _, p := range pos {
				if p >= 1 && int(p) <= len(c.idx) {
					out[k].Lost = append(out[k].Lost, c.idx[p-1])
				}
			}
			if s, ok := short[c.node]; ok {
				errs[k] = append(errs[k], &ReplicaError{Want: w.replicas, Shortfalls: []ReplicaShortfall{s}})
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
			break
		}
		if err := SleepCtx(ctx, Backoff(round)); err != nil {
			for ji := range retry {
				k := pending[ji].orig
				errs[k] = append(errs[k], err)
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
		out[k].Err = errors.Join(errs[k]...)
	}
	return out
}

// shortNodes returns the nodes whose WAIT reply came back short (or not at
// all), by address.
func (e *Engine) shortNodes(waits map[string]rueidis.RedisResult, w *waitAfter) map[string]ReplicaShortfall {
	if w == nil {
		return nil
	}
	short := map[string]ReplicaShortfall{}
	for node, r := range waits {
		acked, err := r.AsInt64()
		if err != nil || int(acked) < w.replicas {
			short[node] = ReplicaShortfall{Node: node, Acked: int(acked)}
		}
	}
	return short
}
