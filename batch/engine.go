package batch

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"

	"github.com/slotlock/slotlock/internal/protocol"
	"github.com/slotlock/slotlock/internal/topology"
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
// Sets: one pipelined round trip per operation, every node in parallel. It
// is a protocol.Strategy.
type Engine struct {
	client  rueidis.Client
	topo    *topology.Source
	perSlot atomic.Bool
	// noFlag: the server refused allow-cross-slot-keys; per-slot calls
	// go without it (and their publishes cannot reach an inbox).
	noFlag atomic.Bool
	waker  *waker

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

	inbox *inbox   // messages to waiters by reservation (reserve.go)
	clock srvClock // server time, for tickets

	// The slot map generation last seen by Queues, and when it changed
	// (mapChurning).
	churnMu  sync.Mutex
	churnGen uint64
	churnAt  time.Time

	closeOnce sync.Once // the waker is shared: give it back once
}

var _ protocol.Strategy = (*Engine)(nil)

// New returns an Engine for client, reading slot ownership from topo.
func New(client rueidis.Client, topo *topology.Source, opt Options) *Engine {
	e := &Engine{client: client, topo: topo, waker: sharedWaker(client), inbox: newInbox()}
	e.perSlot.Store(opt.PerSlot)
	return e
}

// Close ends the goroutines the engine keeps for its calls to nodes and
// waits (up to 10 s) for the waiters' unsubscribes in flight. Calls made
// after Close still work, on goroutines of their own.
func (e *Engine) Close() {
	e.workers.close()
	e.closeOnce.Do(func() {
		e.closeInbox()
		e.waker.release()
	})
}

// PerSlot reports whether the engine makes one call per slot (true) or one
// per node.
func (e *Engine) PerSlot() bool { return e.perSlot.Load() }

// RefreshesHeld is true: the acquire script gives a key the lease already
// holds the attempt's expiry (protocol.Strategy).
func (e *Engine) RefreshesHeld() bool { return true }

// Wait sleeps until the key i may have been released or handed to r.Who:
// a release message that names who or nobody, the key found free,
// unmarked or reserved for who, or a timer (protocol.Strategy).
func (e *Engine) Wait(ctx context.Context, set *protocol.Set, i int, c protocol.Conflict, r *protocol.Request, attempt int, limit time.Duration) error {
	if set.KindOf(i) == protocol.Permit {
		// A permit has no line and no wake-up: the timer alone (the
		// first other holder's expiry, or the jittered backoff,
		// whichever is shorter). docs/safety.md names the gap.
		return protocol.SleepCtx(ctx, fallback(c.TTL, attempt, limit))
	}
	q, qd := set.QueueKeys(i)
	at := line{lock: set.Lock[i], queue: q, deadlines: qd, waiter: waiterOf(r.Who), holder: r.Who.Holder, cleanup: r.CleanupTimeout,
		onReserved: c.Reserved}
	return e.waker.wait(ctx, at, c.TTL, attempt, limit)
}

// Leave takes r.Who out of key i's line and gives the key back if a
// release handed it over meanwhile (leave.lua, protocol.Strategy). A
// permit has no line.
func (e *Engine) Leave(ctx context.Context, set *protocol.Set, i int, r *protocol.Request) {
	if set.KindOf(i) == protocol.Permit {
		return
	}
	q, qd := set.QueueKeys(i)
	e.waker.leave(ctx, line{lock: set.Lock[i], queue: q, deadlines: qd, waiter: waiterOf(r.Who), cleanup: r.CleanupTimeout})
}

// waiterOf is the name under which an acquisition waits in line and is
// handed keys: its lease token (waiter in acquire.lua).
func waiterOf(who protocol.Who) string {
	if who.Lease != "" {
		return who.Lease
	}
	return who.Holder
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
