package batch

import (
	"context"
	"math/rand/v2"
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

	// contention decides whether a Lock skips its first attempt and
	// whether that attempt is bare (contention.go).
	contention contention

	workers workers // the goroutines of multi-node operations

	inbox *inbox   // messages to waiters by reservation (reserve.go)
	clock srvClock // server time, for tickets

	closeOnce sync.Once
}

var _ protocol.Strategy = (*Engine)(nil)

// New returns an Engine for client, reading slot ownership from topo.
func New(client rueidis.Client, topo *topology.Source, opt Options) *Engine {
	e := &Engine{client: client, topo: topo, inbox: newInbox()}
	e.perSlot.Store(opt.PerSlot)
	return e
}

// Close ends the goroutines the engine keeps for its calls to nodes and
// waits (up to 10 s) for the waiters' unsubscribes in flight. Calls made
// after Close still work, on goroutines of their own.
func (e *Engine) Close() {
	e.workers.close()
	e.closeOnce.Do(e.closeInbox)
}

// PerSlot reports whether the engine makes one call per slot (true) or one
// per node.
func (e *Engine) PerSlot() bool { return e.perSlot.Load() }

// RefreshesHeld is true: the acquire script gives a key the lease already
// holds the attempt's expiry (protocol.Strategy).
func (e *Engine) RefreshesHeld() bool { return true }

// Wait sleeps before the next attempt on key i (protocol.Strategy). It
// serves only an acquisition that could not get a ticket (no server time:
// a node unreachable) and waits keeping its prefix this once: every other
// wait is by reservation (reserve.go). The holder's remaining TTL (plus a
// little), capped by a jittered backoff and limit.
func (e *Engine) Wait(ctx context.Context, _ *protocol.Set, _ int, c protocol.Conflict, _ *protocol.Request, attempt int, limit time.Duration) error {
	d := min(protocol.WaitBackoff(attempt), limit)
	if c.TTL >= 0 {
		d = min(d, c.TTL+time.Millisecond+rand.N(time.Millisecond))
	}
	return protocol.SleepCtx(ctx, d)
}

// waiterOf is the name under which an acquisition waits and is handed
// keys: its lease token (waiter in acquire.lua and reserve.lua).
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

// closeTimeout bounds Close: an unsubscribe waits for its Receive to end,
// and rueidis may sit on a redial of a paused node for seconds.
const closeTimeout = 10 * time.Second

// waitBounded waits for wg, at most closeTimeout.
func waitBounded(wg *sync.WaitGroup) {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	t := time.NewTimer(closeTimeout)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
}
