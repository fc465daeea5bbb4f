package batch

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"

	"github.com/slotlock/slotlock/internal/lockval"
	"github.com/slotlock/slotlock/internal/protocol"
	"github.com/slotlock/slotlock/internal/rediserr"
	"github.com/slotlock/slotlock/slot"
)

// Waiting by reservation (protocol.Queuer; docs/design.md, "Waiting by
// reservation across processes"): reserve.lua reserves or queues, acquire.lua
// mode 'c' confirms, and the messages of releases and of older waiters
// reach a waiter on its Engine's inbox: one sharded channel per node, in a
// slot that node owns, subscribed once and kept (a wait costs no
// SSUBSCRIBE). A hand-off names the round whose queue entry it popped, and
// the waiter takes it as evidence, which decides when it confirms, only by
// the rules of internal/protocol/evidence.go. A lost message
// costs a waiter at most protocol.ReserveRefresh, never a lock.

var _ protocol.Queuer = (*Engine)(nil)

// Contended reports whether a Lock should wait by reservation without a
// first attempt (protocol.Queuer): while at least half of this Engine's
// recent acquisitions met a key they could not take (contention.go).
func (e *Engine) Contended() bool { return e.contention.rate() >= contendedAt }

// Met records an acquisition's first contact (protocol.Queuer).
func (e *Engine) Met(conflict bool) { e.contention.note(conflict) }

// srvClock is the Engine's latest sample of server time, for tickets.
type srvClock struct {
	mu sync.Mutex
	us int64     // server time in microseconds
	at time.Time // when the reply carrying it arrived (monotonic)
}

// sampleMaxAge bounds the age of the sample a ticket is estimated from.
const sampleMaxAge = time.Minute

func (c *srvClock) set(sec, usec int64) {
	c.mu.Lock()
	c.us, c.at = sec*1_000_000+usec, time.Now()
	c.mu.Unlock()
}

// Ticket estimates the servers' time in microseconds (protocol.Queuer):
// the latest TIME a reserve reply carried plus the monotonic time since,
// or a TIME command when there is no recent sample. Its error shifts only
// order between waiters of different processes.
func (e *Engine) Ticket(ctx context.Context) (string, error) {
	c := &e.clock
	c.mu.Lock()
	us, at := c.us, c.at
	c.mu.Unlock()
	if at.IsZero() || time.Since(at) > sampleMaxAge {
		t, err := e.client.Do(ctx, e.client.B().Time().Build()).AsIntSlice()
		if err != nil || len(t) != 2 {
			return "", fmt.Errorf("slotlock: server time for a ticket: %w", errors.Join(err, errors.New("no reply")))
		}
		c.set(t[0], t[1])
		c.mu.Lock()
		us, at = c.us, c.at
		c.mu.Unlock()
	}
	return strconv.FormatInt(us+time.Since(at).Microseconds(), 10), nil
}

// inbox is an Engine's channels for messages to its waiters.
type inbox struct {
	id      string // the Engine's random id, the end of every channel name
	refused atomic.Bool

	mu        sync.Mutex
	subs      map[string]*inboxSub
	listeners map[string]chan protocol.Msg // by waiter (lease token)
	ctx       context.Context
	cancel    context.CancelFunc
	bg        sync.WaitGroup

	slotsMu  sync.Mutex
	slotsGen uint64
	slots    map[string]uint16 // node -> the slot of its inbox
}

type inboxSub struct {
	ready  chan struct{} // closed when the server confirmed the subscription
	done   chan struct{} // closed when the subscription ended
	waited atomic.Bool   // a reserve already waited for it
}

func newInbox() *inbox {
	var b [16]byte
	_, _ = rand.Read(b[:])
	ctx, cancel := context.WithCancel(context.Background())
	return &inbox{id: base64.RawURLEncoding.EncodeToString(b[:]), subs: map[string]*inboxSub{},
		listeners: map[string]chan protocol.Msg{}, ctx: ctx, cancel: cancel}
}

// Listen delivers the messages to r.Who's acquisition of n keys
// (protocol.Queuer). A release hands on all its keys at once: the
// buffer holds two messages per key (a hand-off and a yield) and some,
// so that a burst arriving while the waiter is in a round is kept; a
// message dropped (keys past listenKeys) waits for the next refresh.
func (e *Engine) Listen(r *protocol.Request, n int) (<-chan protocol.Msg, func()) {
	b, w := e.inbox, waiterOf(r.Who)
	ch := make(chan protocol.Msg, listenBuffer(n))
	b.mu.Lock()
	b.listeners[w] = ch
	b.mu.Unlock()
	return ch, func() {
		b.mu.Lock()
		delete(b.listeners, w)
		b.mu.Unlock()
	}
}

// listenKeys caps the keys Listen buffers for: a Msg is 32 bytes, so a
// waiter's buffer stays under 1 MiB however many keys it waits for.
const listenKeys = 8192

// listenBuffer is the buffer of Listen's channel for n keys.
func listenBuffer(n int) int { return 16 + 2*min(n, listenKeys) }

// deliver hands one inbox message ("h <key> <waiter>/<seq>" or "y <key>
// <waiter>") to its listener, and drops it when the listener is gone or
// behind (its next reserve learns the same). A hand-off's seq names the
// call that created the popped entry (lockval.ParseHandOff; 0 from an
// older version).
func (b *inbox) deliver(m rueidis.PubSubMessage) {
	yield := strings.HasPrefix(m.Message, lockval.Yield)
	if !yield && !strings.HasPrefix(m.Message, lockval.HandOff) {
		return
	}
	rest := m.Message[2:]
	sp := strings.LastIndexByte(rest, ' ')
	if sp < 0 {
		return
	}
	w, seq := rest[sp+1:], int64(0)
	if !yield {
		w, seq = lockval.ParseHandOff(w)
	}
	b.mu.Lock()
	ch := b.listeners[w]
	b.mu.Unlock()
	if ch == nil {
		return
	}
	select {
	case ch <- protocol.Msg{Key: rest[:sp], Yield: yield, Seq: seq}:
	default:
	}
}

// subscribe returns the subscription to channel ch, starting it when there
// is none (or the last one ended: the server drops it when the slot
// moves).
func (e *Engine) subscribe(ch string) *inboxSub {
	b := e.inbox
	b.mu.Lock()
	defer b.mu.Unlock()
	if s := b.subs[ch]; s != nil {
		return s
	}
	s := &inboxSub{ready: make(chan struct{}), done: make(chan struct{})}
	if b.ctx.Err() != nil {
		close(s.done)
		return s
	}
	b.subs[ch] = s
	b.bg.Add(1)
	go func() {
		defer b.bg.Done()
		var once sync.Once
		hooked := rueidis.WithOnSubscriptionHook(b.ctx, func(p rueidis.PubSubSubscription) {
			if p.Kind == "ssubscribe" {
				once.Do(func() { close(s.ready) })
			}
		})
		err := e.client.Receive(hooked, e.client.B().Ssubscribe().Channel(ch).Build(), b.deliver)
		if rediserr.IsErrorReply(err) {
			b.refused.Store(true) // ACL, proxy: waiters live on their refresh
		}
		b.mu.Lock()
		if b.subs[ch] == s {
			delete(b.subs, ch)
		}
		b.mu.Unlock()
		close(s.done)
	}()
	return s
}

// close ends the inbox's subscriptions (rueidis forgets a cancelled
// Receive locally but keeps the server's subscription on the shared
// connection: hence SUNSUBSCRIBE) and waits for them, at most closeTimeout.
func (e *Engine) closeInbox() {
	b := e.inbox
	b.cancel()
	b.mu.Lock()
	var chs []string
	for ch := range b.subs {
		chs = append(chs, ch)
	}
	b.mu.Unlock()
	if !b.refused.Load() {
		for _, ch := range chs {
			ctx, stop := context.WithTimeout(context.Background(), time.Second)
			_ = e.client.Do(ctx, e.client.B().Sunsubscribe().Channel(ch).Build()).Error()
			stop()
		}
	}
	waitBounded(&b.bg)
}

// inboxSlots returns, per node address, the slot of the node's inbox: the
// one it had under the previous map while the node still owns it (a
// waiter's queue entries and reservations name its inbox, and messages to
// a name the Engine no longer listens on are lost: a reshard that moves
// other slots must not change it), else the lowest slot the node owns.
func (e *Engine) inboxSlots(ctx context.Context) (map[string]uint16, error) {
	b := e.inbox
	gen := e.topo.Generation()
	b.slotsMu.Lock()
	defer b.slotsMu.Unlock()
	if b.slots != nil && b.slotsGen == gen {
		return b.slots, nil
	}
	m, err := e.topo.Current(ctx)
	if err != nil {
		return nil, err
	}
	out := make(map[string]uint16, len(m.Addrs))
	for node, s := range b.slots {
		if o := m.Owner(s); o >= 0 && m.Addrs[o] == node {
			out[node] = s
		}
	}
	for s := range uint16(slot.Count) {
		if o := m.Owner(s); o >= 0 {
			if _, ok := out[m.Addrs[o]]; !ok {
				out[m.Addrs[o]] = s
			}
		}
	}
	b.slots, b.slotsGen = out, gen
	return out, nil
}

// subscribeWait bounds how long a reserve waits for a new inbox
// subscription to be confirmed: a hand-off published before it is lost
// (and found by the next refresh, protocol.QueuedRefresh), so the wait is
// worth a round trip or two, not more. A subscription that stays
// unconfirmed (its slot is migrating, the server is slow) is waited for
// by one reserve only.
const subscribeWait = 50 * time.Millisecond

// reserveWaiter is reserve.lua's ARGV[1]: the waiter (waiterOf), and for
// a reentrant lease a space and its owner, whose keys it counts as its own.
func reserveWaiter(who protocol.Who) string {
	if who.Lease != "" {
		return who.Lease + " " + who.Holder
	}
	return who.Holder
}

// Reserve runs reserve.lua over every key of set (protocol.Queuer), each
// node's call with the inbox of that node.
func (e *Engine) Reserve(ctx context.Context, set *protocol.Set, r *protocol.Request, ticket string, seq int64, leave bool) protocol.Reservations {
	out := protocol.Reservations{Keys: make([]protocol.KeyReply, set.Len())}
	mode := "r:" + strconv.FormatInt(seq, 10)
	if leave {
		mode = "l:" + strconv.FormatInt(seq, 10)
	}
	slots, err := e.inboxSlots(ctx)
	if err != nil {
		out.Err = err
		return out
	}
	inboxOf := func(node string) string {
		s, ok := slots[node]
		if !ok {
			return "" // a node the map no longer has: the call fails anyway
		}
		return set.Inbox(e.inbox.id, s)
	}
	waiter := reserveWaiter(r.Who)
	var jobs []job
	reserveJob := func(idx []int, mode string) job {
		return job{s: reserveScript, set: set, idx: idx, queue: true, orig: len(jobs),
			head: []string{waiter, ticket, "", mode},
			nodeHead: func(node string) []string {
				return []string{waiter, ticket, inboxOf(node), mode}
			}}
	}
	// Keys wanted shared go in calls of their own, mode 's' (a reader's
	// reservation: reserve.lua), and so do permits, with their units and
	// limits (kind 'p'), mode 'p' or, to leave, 'P'; a leave treats every
	// key alike.
	x, sh, pm := set.Split(nil)
	if leave {
		x, sh = append(x, sh...), nil
		slices.Sort(x)
	}
	if len(x) > 0 {
		jobs = append(jobs, reserveJob(x, mode))
	}
	if len(sh) > 0 {
		jobs = append(jobs, reserveJob(sh, "s"+mode[1:]))
	}
	if len(pm) > 0 {
		pmode := "p" + mode[1:]
		if leave {
			pmode = "P" + mode[1:]
		}
		j := reserveJob(pm, pmode)
		j.kind = 'p'
		jobs = append(jobs, j)
	}
	calls, gen, err := e.plan(ctx, jobs, e.perSlot.Load())
	if err != nil {
		_, _ = e.topo.Refresh(ctx, gen)
		out.Err = err
		return out
	}
	out.Deaf = e.inbox.refused.Load()
	if !leave && !out.Deaf {
		e.awaitInboxes(ctx, calls, inboxOf)
	}
	for _, c := range calls {
		out.Deaf = out.Deaf || c.perSlot && !c.flagged // no SPUBLISH to another slot
	}
	res, _ := e.exec(ctx, calls, jobs, nil)
	var errs []error
	stale := false
	for ci, res := range res {
		c := calls[ci]
		vals, err := res.AsIntSlice()
		if err == nil && (len(vals) != 2+len(c.idx) || slices.ContainsFunc(vals[2:], func(v int64) bool { return v < -1 })) {
			err = fmt.Errorf("malformed reserve reply %v", vals)
		}
		if pos, limit, ok := rediserr.LimitMismatch(err); ok && pos >= 1 && pos <= len(c.idx) {
			// Refused before any write: a permit whose live holders came
			// with another limit while this waiter waited.
			i := c.idx[pos-1]
			errs = append(errs, &protocol.LimitError{Resource: set.Keys[i].Name, Held: limit, Asked: set.Kinds[i].Limit})
			continue
		}
		if err != nil {
			ne, refused := e.classify(reserveScript, c, err)
			if refused {
				// Nothing ran; the next reserve goes per slot without
				// the flag. Its keys read as not reserved meanwhile.
				stale = true
				continue
			}
			if ne.Kind == rediserr.ErrStaleTopology && !c.perSlot {
				e.markSlotMode(c.node)
			}
			stale = stale || ne.Kind == rediserr.ErrStaleTopology || ne.Kind == rediserr.ErrUnknownOutcome
			if ne.Kind == rediserr.ErrUnknownOutcome {
				// The call may still run (rule L of the evidence).
				for _, i := range c.idx {
					out.Keys[i].Unknown = true
				}
			}
			errs = append(errs, ne)
			continue
		}
		e.clock.set(vals[0], vals[1])
		for k, i := range c.idx {
			switch v := vals[2+k]; {
			case v == -1:
				out.Keys[i].Stale = true
			case v > 0:
				out.Keys[i].Entry = v
			case !leave:
				out.Keys[i].Mine = true
			}
		}
	}
	if stale {
		_, _ = e.topo.Refresh(ctx, gen)
	}
	out.Err = errors.Join(errs...)
	return out
}

// awaitInboxes subscribes to the inbox of every node calls go to, and
// waits (at most subscribeWait) until the new subscriptions are confirmed:
// the reserve that puts a waiter in line must not come before the
// subscription that hears the hand-off.
func (e *Engine) awaitInboxes(ctx context.Context, calls []call, inboxOf func(string) string) {
	var timer *time.Timer
	for _, c := range calls {
		ch := inboxOf(c.node)
		if ch == "" {
			continue
		}
		s := e.subscribe(ch)
		select {
		case <-s.ready:
			continue
		default:
		}
		if s.waited.Swap(true) {
			continue
		}
		if timer == nil {
			timer = time.NewTimer(subscribeWait)
			defer timer.Stop()
		}
		select {
		case <-s.ready:
		case <-s.done:
		case <-timer.C:
			return
		case <-ctx.Done():
			return
		}
	}
}
