package tracking

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/rueidis"

	"github.com/slotlock/slotlock/internal/rediserr"
)

// Bounds of one node's work. A read that takes longer than readTimeout is
// treated like a broken connection (a paused node): the keys are read again
// on a new connection, while the deadlines and the watchdog cover them.
// The reconnect backoff is its own curve, not protocol.Backoff (1 to 64 ms,
// for a moved slot): a node that cannot be reached is retried up to 4 times
// a second, and the failover figure in docs/design.md depends on that cap.
const (
	readTimeout = time.Second
	minBackoff  = 10 * time.Millisecond
	maxBackoff  = 250 * time.Millisecond
)

// errNoClient: rueidis does not (yet) know the node, e.g. right after a
// failover promoted it.
var errNoClient = errors.New("tracking: no client for the node")

// node is the tracking connection to one master and the keys registered,
// or to be registered, on it. Its goroutine owns the connection.
type node struct {
	t    *Tracker
	addr string
	kick chan struct{}

	mu      sync.Mutex
	owned   map[string]struct{} // keys routed here and still watched
	pending map[string]struct{} // owned keys to read (again)
	gen     uint64              // connection generation, for stale callbacks

	conn    rueidis.DedicatedClient // only the goroutine touches it
	backoff time.Duration
}

func newNode(t *Tracker, addr string) *node {
	return &node{
		t:       t,
		addr:    addr,
		kick:    make(chan struct{}, 1),
		owned:   make(map[string]struct{}),
		pending: make(map[string]struct{}),
	}
}

func (n *node) poke() {
	select {
	case n.kick <- struct{}{}:
	default:
	}
}

// add makes keys owned here and reads them.
func (n *node) add(keys ...string) {
	n.mu.Lock()
	for _, k := range keys {
		n.owned[k] = struct{}{}
		n.pending[k] = struct{}{}
	}
	n.mu.Unlock()
	n.poke()
}

// drop forgets keys (no longer watched, or routed elsewhere).
func (n *node) drop(keys ...string) {
	n.mu.Lock()
	for _, k := range keys {
		delete(n.owned, k)
		delete(n.pending, k)
	}
	n.mu.Unlock()
}

// invalidated is the push handler of connection generation gen. It runs on
// rueidis's reader goroutine and must not block. nil means every key: a
// flush, or the connection ended.
func (n *node) invalidated(gen uint64, msgs []rueidis.RedisMessage) {
	if msgs == nil {
		n.t.stats.resyncs.Add(1)
		n.mu.Lock()
		if gen == n.gen {
			for k := range n.owned {
				n.pending[k] = struct{}{}
			}
		}
		n.mu.Unlock()
		n.poke()
		return
	}
	keys := make([]string, 0, len(msgs))
	for _, m := range msgs {
		if k, err := m.ToString(); err == nil {
			keys = append(keys, k)
		}
	}
	// A key is owned here from before the read that registers it (add),
	// so a push that overtakes that read's reply still counts.
	hints := 0
	n.mu.Lock()
	for _, k := range keys {
		if _, ok := n.owned[k]; ok {
			n.pending[k] = struct{}{}
			hints++
		}
	}
	n.mu.Unlock()
	if hints == 0 {
		return
	}
	n.t.stats.hints.Add(int64(hints))
	n.poke()
}

func (n *node) run() {
	defer n.t.wg.Done()
	defer n.closeConn()
	var retry <-chan time.Time
	for {
		if retry != nil {
			// Backing off: new keys wait too, or a stream of them (a
			// reroute after each failure) would make it a busy loop.
			select {
			case <-n.t.stop:
				return
			case <-retry:
			}
		} else {
			select {
			case <-n.t.stop:
				return
			case <-n.kick:
			}
		}
		retry = nil
		if n.t.refused.Load() {
			n.mu.Lock()
			clear(n.pending)
			clear(n.owned)
			n.mu.Unlock()
			continue
		}
		if err := n.step(); err != nil {
			n.backoff = min(max(2*n.backoff, minBackoff), maxBackoff)
			retry = time.After(n.backoff)
			continue
		}
		n.backoff = 0
	}
}

// step reads every pending key once; an error means: try again later.
func (n *node) step() error {
	n.mu.Lock()
	keys := make([]string, 0, len(n.pending))
	for k := range n.pending {
		keys = append(keys, k)
	}
	clear(n.pending)
	n.mu.Unlock()
	if len(keys) == 0 {
		return nil
	}
	if err := n.read(keys); err != nil {
		n.mu.Lock()
		for _, k := range keys {
			if _, ok := n.owned[k]; ok {
				n.pending[k] = struct{}{}
			}
		}
		n.mu.Unlock()
		return err
	}
	return nil
}

// read GETs keys on the tracking connection, which registers them, and
// settles what the replies say.
func (n *node) read(keys []string) error {
	if n.conn == nil {
		if err := n.connect(); err != nil {
			if refusal(err) {
				// CLIENT TRACKING refused: deadlines only, for good.
				n.t.refused.Store(true)
				return nil
			}
			n.t.reroute(keys) // the master may have moved
			return err
		}
		// Registrations live on a connection: a new one reads every key
		// of the node.
		n.mu.Lock()
		keys = make([]string, 0, len(n.owned))
		for k := range n.owned {
			keys = append(keys, k)
		}
		clear(n.pending)
		n.mu.Unlock()
		if len(keys) == 0 {
			return nil
		}
	}
	cmds := make(rueidis.Commands, len(keys))
	for i, k := range keys {
		cmds[i] = n.conn.B().Get().Key(k).Build()
	}
	ctx, cancel := context.WithTimeout(context.Background(), readTimeout)
	res := n.conn.DoMulti(ctx, cmds...)
	cancel()
	vals := make([]*string, 0, len(keys))
	settled := keys[:0:0]
	var stale []string
	for i, r := range res {
		if err := r.Error(); rediserr.Lost(err) {
			// A broken or stalled connection: a new one, and every
			// key of this node read again on it.
			n.closeConn()
			n.mu.Lock()
			for k := range n.owned {
				n.pending[k] = struct{}{}
			}
			n.mu.Unlock()
			n.settle(settled, vals)
			return fmt.Errorf("tracking: read on %s: %w", n.addr, err)
		}
		v, err := r.ToString()
		switch {
		case err == nil:
			vals = append(vals, &v)
			settled = append(settled, keys[i])
		case rediserr.IsNil(err):
			vals = append(vals, nil)
			settled = append(settled, keys[i])
		case rediserr.IsStale(err):
			stale = append(stale, keys[i])
		default:
			// WRONGTYPE and the like: a key written by hand. The
			// watchdog's extend reports it; nothing to settle here.
		}
	}
	n.settle(settled, vals)
	if len(stale) > 0 {
		n.drop(stale...)
		n.t.reroute(stale)
	}
	return nil
}

func (n *node) settle(keys []string, vals []*string) {
	if len(keys) > 0 {
		n.t.settle(keys, vals)
	}
}

// connect takes a dedicated connection to the node from the caller's
// client and turns tracking on in the default mode (every read registers).
// The client's own setting (OPTIN, or none with DisableCache) is replaced
// on this connection only.
func (n *node) connect() error {
	nc := n.t.client.Nodes()[n.addr]
	if nc == nil {
		return fmt.Errorf("%w %s", errNoClient, n.addr)
	}
	dc, release := nc.Dedicate()
	n.mu.Lock()
	n.gen++
	gen := n.gen
	n.mu.Unlock()
	dc.SetOnInvalidations(func(m []rueidis.RedisMessage) { n.invalidated(gen, m) })
	ctx, cancel := context.WithTimeout(context.Background(), readTimeout)
	defer cancel()
	res := dc.DoMulti(ctx,
		dc.B().ClientTracking().Off().Build(),
		dc.B().ClientTracking().On().Build())
	for _, r := range res {
		if err := r.Error(); err != nil {
			dc.Close()
			release()
			return fmt.Errorf("tracking: CLIENT TRACKING ON on %s: %w", n.addr, err)
		}
	}
	n.conn = dc
	return nil
}

// refusal reports whether err is the server refusing tracking for good (an
// ACL without CLIENT, a server or proxy without the command) rather than a
// passing state (BUSY, LOADING, a failover): only a refusal turns tracking
// off for the Locker's life; anything else is retried with backoff.
func refusal(err error) bool { return rediserr.CommandRefused(err) }

// closeConn closes the connection (rueidis reports that as one more nil
// invalidation, of a generation that is then stale).
func (n *node) closeConn() {
	if n.conn == nil {
		return
	}
	n.mu.Lock()
	n.gen++
	n.mu.Unlock()
	n.conn.Close()
	n.conn = nil
}
