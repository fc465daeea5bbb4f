package batch

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"

	"github.com/slotlock/slotlock/internal/lockval"
	"github.com/slotlock/slotlock/internal/protocol"
	"github.com/slotlock/slotlock/internal/rediserr"
)

// waker lets a waiter sleep until the lock key it needs is released, without
// polling Redis. The acquire script queues the waiter on the conflicting
// key and marks it ("!"); the release script hands a marked key to the
// oldest waiter in its queue and publishes "h <waiter>" on the sharded
// channel named like the key (SPUBLISH lands in the key's own slot, on the
// node that holds it), or, with nobody in line, deletes it and publishes
// "r". The waiter subscribes to that channel and wakes on "r" and on a
// hand-off to itself only: a hand-off to another leaves the key reserved
// for that one, so waking would cost an attempt that cannot succeed. Two things can still be missed (a
// release between the conflict and the subscription, an expiry, which
// publishes nothing, a failover that drops subscriptions), so every wait is
// also bounded by a timer: the holder's remaining TTL, or a jittered backoff,
// whichever is shorter.
type waker struct {
	client rueidis.Client
	// noPubSub is set after the server refused SSUBSCRIBE (ACL, proxy):
	// from then on waits use the timer alone.
	noPubSub atomic.Bool

	users int // Engines sharing it (under wakers' lock)

	mu   sync.Mutex
	subs map[string]*channel
	bg   sync.WaitGroup // unsubscribes in flight
}

// channel is the state of one sharded channel: how many waiters listen, and
// whether the last one's unsubscribe is still in flight.
type channel struct {
	waiters int
	// closing is closed when the SUNSUBSCRIBE of the last waiter is done:
	// a new waiter subscribes only after it, so that the unsubscribe cannot
	// cancel the new subscription on the server.
	closing chan struct{}
}

// wakers holds one waker per client, shared by every Engine on that
// client. A client has one pub/sub connection per node, and a channel's
// subscription on it is the client's, not a caller's: with a waker per
// Engine, one Locker's SUNSUBSCRIBE of a key ended the subscription that
// another Locker's waiter on the same key and client still listened on,
// and that waiter missed its hand-off until its next tick. The one piece
// of package state in the library, for that reason: the thing it
// coordinates (the client's subscriptions) is shared beyond any one
// Engine.
var wakers = struct {
	sync.Mutex
	m map[rueidis.Client]*waker
}{m: map[rueidis.Client]*waker{}}

// sharedWaker returns the waker of client, counting one more user.
func sharedWaker(client rueidis.Client) *waker {
	wakers.Lock()
	defer wakers.Unlock()
	w := wakers.m[client]
	if w == nil {
		w = newWaker(client)
		wakers.m[client] = w
	}
	w.users++
	return w
}

// release counts one user less, and closes the waker after its last.
func (w *waker) release() {
	wakers.Lock()
	w.users--
	last := w.users == 0
	if last {
		delete(wakers.m, w.client)
	}
	wakers.Unlock()
	if last {
		w.close()
	}
}

func newWaker(client rueidis.Client) *waker {
	return &waker{client: client, subs: make(map[string]*channel)}
}

// closeTimeout bounds Close: an unsubscribe waits for its Receive to end,
// and rueidis may sit on a redial of a paused node for seconds.
const closeTimeout = 10 * time.Second

// close waits for the unsubscribes still in flight, for up to 10 s.
func (w *waker) close() { waitBounded(&w.bg) }

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

// join counts a waiter on ch, after any unsubscribe in flight on it.
func (w *waker) join(ctx context.Context, ch string) error {
	for {
		w.mu.Lock()
		c := w.subs[ch]
		if c == nil {
			c = &channel{}
			w.subs[ch] = c
		}
		if c.closing == nil {
			c.waiters++
			w.mu.Unlock()
			return nil
		}
		closing := c.closing
		w.mu.Unlock()
		select {
		case <-closing:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
}

// fallback is the timer of the attempt-th wait for one key: the holder's
// remaining TTL (plus a little, so the key has surely expired), capped by an
// exponential backoff with jitter so that waiters do not retry in lockstep.
func fallback(holderTTL time.Duration, attempt int, limit time.Duration) time.Duration {
	d := min(protocol.WaitBackoff(attempt), limit)
	if holderTTL >= 0 {
		d = min(d, holderTTL+time.Millisecond+rand.N(time.Millisecond))
	}
	return d
}

// inLineTick caps the pause between two joins of a waiter in line: below
// lockval.ReserveTTL, so that a waiter whose hand-off message was lost
// still comes for its reservation before it expires.
const inLineTick = lockval.ReserveTTL * 4 / 5

// inLine is the pause of a waiter in line before its next join: the
// attempt-th backoff, at most inLineTick, limit and the holder's remaining
// TTL (plus a little).
func inLine(holderTTL time.Duration, attempt int, limit time.Duration) time.Duration {
	return max(fallback(holderTTL, attempt, min(limit, inLineTick)), time.Millisecond)
}

// line names one waiter's place at one lock key: the key, its queue keys
// (join.lua), and who waits.
type line struct {
	lock, queue, deadlines string
	waiter, holder         string
	cleanup                time.Duration // bounds the leave of a waiter that gave up
	// onReserved: the wait began at a key reserved for another waiter
	// (protocol.Conflict.Reserved), so the waiter keeps no prefix.
	onReserved bool
}

// wait returns when the key at.lock may be free or handed to at.waiter: a
// release message (a hand-off to another waiter does not count), join.lua
// finding the key free, the waiter's own or reserved for it, or the timer
// (at most limit). It returns context.Cause(ctx) when ctx ends first.
// attempt counts the waits of one acquisition for this key.
func (w *waker) wait(ctx context.Context, at line, holderTTL time.Duration, attempt int, limit time.Duration) error {
	lockKey, waiter := at.lock, at.waiter
	timer := time.NewTimer(fallback(holderTTL, attempt, limit))
	defer timer.Stop()
	if w.noPubSub.Load() {
		select {
		case <-timer.C:
			return nil
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}

	subCtx, cancel := context.WithCancel(ctx)
	released := make(chan struct{}, 1)
	subscribed := make(chan struct{})
	var once sync.Once
	hooked := rueidis.WithOnSubscriptionHook(subCtx, func(s rueidis.PubSubSubscription) {
		if s.Kind == "ssubscribe" {
			once.Do(func() { close(subscribed) })
		}
	})
	if err := w.join(ctx, lockKey); err != nil {
		cancel()
		return err
	}
	done := make(chan error, 1)
	go func() {
		done <- w.client.Receive(hooked, w.client.B().Ssubscribe().Channel(lockKey).Build(), func(m rueidis.PubSubMessage) {
			if to, ok := strings.CutPrefix(m.Message, lockval.HandOff); ok && to != waiter {
				return // handed to another waiter
			}
			select {
			case released <- struct{}{}:
			default:
			}
		})
	}()
	defer w.unsubscribe(lockKey, cancel, done)

	// Until the subscription is confirmed a release can slip by unheard:
	// once it is, join the key's line (join.lua), which also looks at the
	// key: one that is free, the waiter's own or handed to it means: try
	// now.
	start := time.Now()
	select {
	case <-subscribed:
	case err := <-done:
		// Refused (ACL without &channel access, a proxy without sharded
		// pub/sub, a server before 7.0): timer only from now on.
		done <- err
		if rediserr.IsErrorReply(err) {
			w.noPubSub.Store(true)
		}
		err = waitTimer(ctx, timer, released)
		return err
	case <-released:
		return nil
	case <-timer.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
	// A waiter that gives up (its caller cancelled) leaves the line, and
	// gives back the key if a release handed it over just before: the
	// protocol calls Engine.Leave for the key it last waited for when it
	// gives up or waits for another one (protocol.Strategy.Leave).
	for tick := 0; ; tick++ {
		got, err := joinScript.Exec(ctx, w.client, []string{at.lock, at.queue, at.deadlines}, []string{at.waiter, at.holder}).AsIntSlice()
		if err == nil && len(got) != 2 {
			err = fmt.Errorf("join.lua: reply %v, want 2 integers", got)
		}
		if err != nil {
			// A moving slot (TRYAGAIN while the key and its line are
			// split between two nodes), a lost reply, a refused
			// script: try again shortly, as after a moved slot.
			timer.Stop()
			timer.Reset(min(protocol.Backoff(attempt), limit))
			err := waitTimer(ctx, timer, released)
			return err
		}
		n, reserved := got[0], got[1] == 1
		if n == 0 {
			return nil // free, ours or handed to us: try now
		}
		if reserved && !at.onReserved {
			// Reserved for another waiter since the attempt that
			// started this wait: try now, so that the protocol gives
			// back the prefix this waiter may keep (that waiter may
			// be waiting for it) and then waits for the key holding
			// nothing. Waiting on would keep the prefix until limit.
			return nil
		}
		// In line. The release hands the key over and says so; the
		// ticks cover what sends no message (an expiry) and a message
		// lost (a dropped subscription, a failover). Each tick is one
		// join: it renews the waiter's entry and finds a key handed to
		// it, and it comes within inLineTick, before a reservation
		// made for it would expire.
		left := limit - time.Since(start)
		if left <= 0 {
			return nil
		}
		timer.Stop()
		timer.Reset(inLine(time.Duration(n)*time.Millisecond, attempt+tick+1, left))
		select {
		case <-released:
			return nil
		case err := <-done:
			// The subscription ended (the server drops it when the slot
			// moves): deaf from here on, so try now; the next wait
			// subscribes where the slot went.
			done <- err
			return nil
		case <-timer.C:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
}

// leave takes a waiter that gave up out of a key's line, and gives back
// the key if a release handed it to the waiter meanwhile (leave.lua: one
// slot, through the cluster client), on a context detached from the
// caller's and bounded by the request's cleanup timeout, as rollbacks are
// (a stalled node must not hold the caller beyond it). If it cannot reach
// the node, the entry lapses by its deadline (lockval.EntryTTL) and a
// handed key by its expiry (lockval.ReserveTTL).
func (w *waker) leave(ctx context.Context, at line) {
	lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), at.cleanup)
	defer cancel()
	_ = leaveScript.Exec(lctx, w.client, []string{at.lock, at.queue, at.deadlines}, []string{at.waiter}).Error()
}

// waitTimer waits for the timer, a release message (woken) or the end of
// ctx.
func waitTimer(ctx context.Context, timer *time.Timer, released chan struct{}) error {
	select {
	case <-released:
	case <-timer.C:
	case <-ctx.Done():
		return context.Cause(ctx)
	}
	return nil
}

// unsubscribe ends the Receive of one wait and, when no other waiter of
// this Waker listens on the channel, tells the server to drop the
// subscription (rueidis forgets a cancelled Receive locally but leaves the
// server-side subscription on the shared connection). The server round trip
// runs in the background: a waiter never waits for another's unsubscribe,
// and one on a stalled node delays nobody but the next waiter on that very
// channel.
func (w *waker) unsubscribe(ch string, cancel context.CancelFunc, done chan error) {
	cancel()
	w.mu.Lock()
	defer w.mu.Unlock()
	c := w.subs[ch]
	c.waiters--
	if c.waiters > 0 {
		return
	}
	c.closing = make(chan struct{})
	w.bg.Add(1)
	go func() {
		defer w.bg.Done()
		<-done // the Receive ended: its context is cancelled
		if !w.noPubSub.Load() {
			ctx, stop := context.WithTimeout(context.Background(), time.Second)
			_ = w.client.Do(ctx, w.client.B().Sunsubscribe().Channel(ch).Build()).Error()
			stop()
		}
		w.mu.Lock()
		delete(w.subs, ch)
		close(c.closing)
		w.mu.Unlock()
	}()
}
