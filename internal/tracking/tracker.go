package tracking

import (
	"container/heap"
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"

	"github.com/slotlock/slotlock/internal/lockval"
	"github.com/slotlock/slotlock/internal/protocol"
	"github.com/slotlock/slotlock/internal/topology"
	"github.com/slotlock/slotlock/slot"
)

// Owner is the lease a Watch stands for.
type Owner interface {
	// Deadline returns when the keys expire unless renewed.
	Deadline() time.Time
	// Lost is called once, with the indexes (into the set, ascending) of
	// keys a read on the server found not held by the watch's Holder.
	Lost(idx []int)
	// Expired is called once when Deadline passed.
	Expired()
}

// Watch is one lease as the Tracker sees it. The caller fills the exported
// fields and must not change them after Watch. It is meant to live inside
// the lease (no allocation of its own), and its keys are the lease's set.
type Watch struct {
	// Set holds the lease's lock keys (Set.Lock) and their slots.
	Set *protocol.Set
	// Holder is what every lock key's value starts with while the lease
	// holds it (the lease or owner token; see lockval.Holder). A key
	// reserved for it is not held: a lease holds its keys from its grant.
	Holder string
	Owner  Owner

	// ended: Lost or Expired was called, or the watch was forgotten;
	// neither is called after that.
	ended atomic.Bool
	// at is the deadline of the watch's entry in the Tracker's heap and
	// pos its place there (-1: none), under Tracker.mu. Forget removes
	// the entry: a released lease is not kept reachable until its
	// deadline.
	at  time.Time
	pos int
	// indexed: its keys are in Tracker.keys (under Tracker.mu).
	indexed bool
}

// claim reports whether the caller is the one to end the watch.
func (w *Watch) claim() bool { return w.ended.CompareAndSwap(false, true) }

// ref is one key of one watch.
type ref struct {
	w *Watch
	i int
}

// Tracker watches the lock keys of many leases; see the package comment.
// Its goroutines (one for deadlines and routing, one per master it talks
// to) start with the first Watch and end with Close.
type Tracker struct {
	client rueidis.Client
	topo   *topology.Source

	stats struct{ held, hints, resyncs, wakes atomic.Int64 }

	// refused is set when a server refused CLIENT TRACKING (an ACL, a
	// proxy, a managed service): from then on only deadlines are watched.
	refused atomic.Bool

	mu      sync.Mutex
	fresh   []*Watch            // watched, keys not indexed yet (indexFresh)
	keys    map[string][]ref    // lock key -> the watches holding it
	nodes   map[string]*node    // by master address
	toRoute map[string]struct{} // keys to send to their master's connection
	refresh bool                // toRoute came from a stale reply: read the slot map again
	due     deadlines
	// timerAt is when the run loop's timer fires. A new deadline later
	// than that needs no wake-up: the loop looks at the heap then. (A
	// removed entry leaves the timer as it was: it fires early, harmlessly.)
	timerAt time.Time
	// shortest is the shortest time to its deadline a watch had when it
	// came (about the shortest TTL): with no deadline queued, the timer
	// is set half of it ahead instead of an hour, so that a new watch,
	// due at least that far ahead, needs no wake-up (see expireDue).
	shortest time.Duration
	started  bool
	closed   bool

	kick      chan struct{} // wakes run: a deadline moved
	routeKick chan struct{} // wakes routeLoop: keys to route
	stop      chan struct{}
	wg        sync.WaitGroup
}

// New returns a Tracker that talks to the masters of client, routing keys
// with topo.
func New(client rueidis.Client, topo *topology.Source) *Tracker {
	return &Tracker{
		client:    client,
		topo:      topo,
		keys:      make(map[string][]ref),
		nodes:     make(map[string]*node),
		toRoute:   make(map[string]struct{}),
		kick:      make(chan struct{}, 1),
		routeKick: make(chan struct{}, 1),
		stop:      make(chan struct{}),
	}
}

// Stats counts the Tracker's work since New.
type Stats struct {
	Held    int64 // reads that found the key still held: registered again
	Hints   int64 // invalidations of watched keys received
	Resyncs int64 // nil invalidations (a flush, a connection's end)
	Wakes   int64 // times the deadline loop was woken to move its timer
}

// Stats returns the counters.
func (t *Tracker) Stats() Stats {
	return Stats{Held: t.stats.held.Load(),
		Hints: t.stats.hints.Load(), Resyncs: t.stats.resyncs.Load(), Wakes: t.stats.wakes.Load()}
}

// Watch starts watching w's keys and deadline.
func (t *Tracker) Watch(w *Watch) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return
	}
	if !t.started {
		t.started = true
		t.wg.Add(2)
		go t.run()
		go t.routeLoop()
	}
	if w.ended.Load() {
		return // forgotten before it was watched
	}
	w.pos = -1
	t.push(w, w.Owner.Deadline())
	if left := time.Until(w.at); left > 0 && (t.shortest == 0 || left < t.shortest) {
		t.shortest = left
	}
	if !t.refused.Load() {
		// Indexed by the router, after registerDelay: a lease released
		// before then costs this append and nothing per key. Only the
		// first of a window wakes the router; the others wait for it.
		t.fresh = append(t.fresh, w)
		if len(t.fresh) == 1 {
			t.pokeRouter()
		}
	}
	if w.at.Before(t.timerAt) {
		t.poke() // due before the run loop's timer: it must move
	}
}

// indexFresh indexes the keys of the watches that arrived since the last
// call and are still on; t.mu is held.
func (t *Tracker) indexFresh() {
	for _, w := range t.fresh {
		if w.ended.Load() {
			continue
		}
		w.indexed = true
		for i, k := range w.Set.Lock {
			if w.Set.KindOf(i) != protocol.Exclusive {
				// A shared key's lock value is every holder's, and a
				// permit's hash changes with every taker: the watchdog's
				// renewals are what finds those lost.
				continue
			}
			t.keys[k] = append(t.keys[k], ref{w, i})
			t.toRoute[k] = struct{}{}
		}
	}
	clear(t.fresh)
	t.fresh = t.fresh[:0]
}

// Forget stops watching w: Lost and Expired will not be called after it
// returns. A lease calls it before it releases its keys, so that the
// invalidations of its own release are never taken for a loss.
func (t *Tracker) Forget(w *Watch) {
	w.ended.Store(true)
	t.mu.Lock()
	defer t.mu.Unlock()
	if w.pos >= 0 {
		heap.Remove(&t.due, w.pos)
	}
	if !w.indexed {
		return // still fresh: indexFresh skips it
	}
	w.indexed = false
	var gone []string
	for i, k := range w.Set.Lock {
		if w.Set.KindOf(i) != protocol.Exclusive {
			continue // never indexed
		}
		refs := t.keys[k]
		refs = slices.DeleteFunc(refs, func(r ref) bool { return r.w == w })
		if len(refs) > 0 {
			t.keys[k] = refs
			continue
		}
		delete(t.keys, k)
		delete(t.toRoute, k)
		gone = append(gone, k)
	}
	for _, n := range t.nodes {
		n.drop(gone...)
	}
}

// Rearm tells the Tracker that w's deadline moved, possibly earlier (an
// Extend to a shorter TTL). Later deadlines need no call.
func (t *Tracker) Rearm(w *Watch) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed || w.ended.Load() {
		return
	}
	t.push(w, w.Owner.Deadline())
	t.poke()
}

// Close stops every goroutine and closes the connections. Watches are
// left as they are; no callback runs after Close returns.
func (t *Tracker) Close() {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return
	}
	t.closed = true
	close(t.stop)
	t.mu.Unlock()
	t.wg.Wait()
}

// poke wakes the main loop; t.mu is held or not, either way.
func (t *Tracker) poke() {
	select {
	case t.kick <- struct{}{}:
	default:
	}
}

func (t *Tracker) pokeRouter() {
	select {
	case t.routeKick <- struct{}{}:
	default:
	}
}

// push queues w's deadline d, or moves its entry to d if d is earlier.
func (t *Tracker) push(w *Watch, d time.Time) {
	if w.pos >= 0 {
		if d.Before(w.at) {
			w.at = d
			heap.Fix(&t.due, w.pos)
		}
		return
	}
	w.at = d
	heap.Push(&t.due, w)
}

// routeRetry is how soon keys that could not be routed (no slot map, a
// slot without a master during a failover) are tried again.
const routeRetry = 50 * time.Millisecond

// run ends watches whose deadline passed. It does no I/O, so that nothing
// (a slot map read from a paused node) can make a deadline late.
func (t *Tracker) run() {
	defer t.wg.Done()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		expired, next := t.expireDue(time.Now())
		for _, w := range expired {
			w.Owner.Expired()
		}
		timer.Reset(next)
		select {
		case <-t.stop:
			return
		case <-t.kick:
			t.stats.wakes.Add(1)
		case <-timer.C:
		}
	}
}

// registerDelay is how long new keys wait before they are read on the
// tracking connections: a loss in a lease's first registerDelay is seen
// at the read, up to registerDelay plus a round trip after it happened.
// Lock and release of 1,000 keys on loopback cost the client about 0.35 ms
// of CPU and each master a GET per key without it (docs/design.md).
const registerDelay = 20 * time.Millisecond

// routeLoop sends keys to their master's connection, reading the slot map
// when it has to.
func (t *Tracker) routeLoop() {
	defer t.wg.Done()
	var retry <-chan time.Time
	for {
		select {
		case <-t.stop:
			return
		case <-t.routeKick:
			// Gather for registerDelay first: the keys of a lease released
			// meanwhile are never read (most leases of a busy service live
			// for milliseconds, and reading each key of each costs its
			// master a GET and a tracking entry), and a loss that comes
			// before the read is still caught by it.
			select {
			case <-t.stop:
				return
			case <-time.After(registerDelay):
			}
		case <-retry:
		}
		retry = nil
		if !t.route() {
			retry = time.After(routeRetry)
		}
	}
}

// expireDue pops the watches whose deadline passed and claims them; it
// returns them and how long until the next deadline.
func (t *Tracker) expireDue(now time.Time) (expired []*Watch, next time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for t.due.Len() > 0 {
		w := t.due[0]
		if w.at.After(now) {
			t.timerAt = w.at
			return expired, w.at.Sub(now)
		}
		heap.Pop(&t.due)
		if w.ended.Load() {
			continue // lost, its lease not ended yet
		}
		if d := w.Owner.Deadline(); d.After(now) {
			t.push(w, d) // renewed since
			continue
		}
		if w.claim() {
			expired = append(expired, w)
		}
	}
	// Nothing queued. An hour ahead, every new watch would be due
	// before the timer and wake this loop: one wake-up per lease, for
	// leases released within microseconds (a single-key lock and
	// release was about a quarter slower with the tracker on; see
	// TestShortLeasesDoNotWakeTheLoop). Half the shortest TTL ahead (10
	// ms at least), a new watch is due after the timer and is picked up
	// when it fires; one due sooner still wakes the loop (Watch). Every
	// deadline is kept as before: the timer never fires after the
	// earliest queued one.
	idle := time.Hour
	if t.shortest > 0 {
		idle = min(idle, max(t.shortest/2, 10*time.Millisecond))
	}
	t.timerAt = now.Add(idle)
	return expired, idle
}

// route hands every key of toRoute to the connection of the master that
// owns its slot; it reports false when some keys must wait for a slot map.
func (t *Tracker) route() bool {
	t.mu.Lock()
	t.indexFresh()
	if len(t.toRoute) == 0 || t.closed {
		t.mu.Unlock()
		return true
	}
	refresh := t.refresh
	t.refresh = false
	t.mu.Unlock()

	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	var m *slot.Map
	var err error
	if refresh {
		m, err = t.topo.Refresh(ctx, t.topo.Generation())
	} else {
		m, err = t.topo.Current(ctx)
	}
	if m == nil {
		_ = err // keys wait; the watchdog covers them meanwhile
		return false
	}

	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return true
	}
	byNode := map[*node][]string{}
	ok := true
	for k := range t.toRoute {
		refs := t.keys[k]
		if len(refs) == 0 {
			delete(t.toRoute, k)
			continue
		}
		o := m.Owner(refs[0].w.Set.Keys[refs[0].i].Slot)
		if o < 0 {
			ok = false
			continue
		}
		n := t.nodeLocked(m.Addrs[o])
		byNode[n] = append(byNode[n], k)
		delete(t.toRoute, k)
	}
	for n, keys := range byNode {
		for _, other := range t.nodes {
			if other != n {
				other.drop(keys...)
			}
		}
		n.add(keys...)
	}
	return ok
}

// nodeLocked returns the connection state of addr, starting its goroutine
// the first time.
func (t *Tracker) nodeLocked(addr string) *node {
	n := t.nodes[addr]
	if n == nil {
		n = newNode(t, addr)
		t.nodes[addr] = n
		t.wg.Add(1)
		go n.run()
	}
	return n
}

// reroute sends keys back to the router after a stale reply (MOVED, ASK)
// or a node that cannot be reached: the slot map is read again first.
func (t *Tracker) reroute(keys []string) {
	t.mu.Lock()
	for _, k := range keys {
		if _, ok := t.keys[k]; ok {
			t.toRoute[k] = struct{}{}
		}
	}
	t.refresh = true
	t.mu.Unlock()
	t.pokeRouter()
}

// settle applies the reads of keys: vals[i] is the value of
// keys[i] (nil: no key). Watches whose holder does not match lose those
// keys.
func (t *Tracker) settle(keys []string, vals []*string) {
	lost := map[*Watch][]int{}
	var held int64
	t.mu.Lock()
	for i, k := range keys {
		for _, r := range t.keys[k] {
			if v := vals[i]; v == nil || lockval.Holder(*v) != r.w.Holder {
				lost[r.w] = append(lost[r.w], r.i)
			} else {
				held++
			}
		}
	}
	t.stats.held.Add(held)
	t.mu.Unlock()
	for w, idx := range lost {
		if w.claim() {
			slices.Sort(idx)
			w.Owner.Lost(idx)
		}
	}
}

// deadlines is a min-heap of watches by deadline; each watch is in it at
// most once, at Watch.pos.
type deadlines []*Watch

func (h deadlines) Len() int           { return len(h) }
func (h deadlines) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h deadlines) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].pos, h[j].pos = i, j
}
func (h *deadlines) Push(x any) {
	w := x.(*Watch)
	w.pos = len(*h)
	*h = append(*h, w)
}
func (h *deadlines) Pop() any {
	old := *h
	w := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	w.pos = -1
	return w
}
