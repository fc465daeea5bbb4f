package batch

import (
	"context"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"

	"github.com/slotlock/slotlock/internal/protocol"
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

func newWaker(client rueidis.Client) *waker {
	return &waker{client: client, subs: make(map[string]*channel)}
}

// closeTimeout bounds Close: an unsubscribe waits for its Receive to end,
// and rueidis may sit on a redial of a paused node for seconds.
const closeTimeout = 10 * time.Second

// close waits for the unsubscribes still in flight, for up to 10 s.
func (w *waker) close() {
	done := make(chan struct{})
	go func() { w.bg.Wait(); close(done) }()
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

// inLine is the timer of a waiter that joined a key's line: the holder's
// remaining TTL (plus a little), at most limit and MaxWait.
func inLine(holderTTL, limit time.Duration) time.Duration {
	d := min(limit, protocol.MaxWait)
	if holderTTL >= 0 {
		d = min(d, holderTTL+time.Millisecond+rand.N(time.Millisecond))
	}
	return d
}

// wait returns when lockKey may have been released: a release message, the
// key found free or unmarked after subscribing, or the fallback timer (at
// most limit). It returns context.Cause(ctx) when ctx ends first. attempt
// counts the waits of one acquisition for this key.
// line names one waiter's place at one lock key: the key, its queue keys
// (join.lua), and who waits.
type line struct {
	lock, queue, deadlines string
	waiter, holder         string
}

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
			if to, ok := strings.CutPrefix(m.Message, "h "); ok && to != waiter {
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
	// now. A join that fails leaves the waiter to its message or timer.
	select {
	case <-subscribed:
		n, err := joinScript.Exec(ctx, w.client, []string{at.lock, at.queue, at.deadlines}, []string{at.waiter, at.holder}).AsInt64()
		if err == nil && n == 0 {
			return nil
		}
		if err == nil {
			// In line: the release hands the key over and says so, so
			// the timer only covers an expiry (no message) and a lost
			// message. It is at most MaxWait, well inside the entry's
			// life (lockval.EntryTTL), so the next attempt joins again
			// before the entry lapses.
			timer.Stop()
			timer.Reset(inLine(time.Duration(n)*time.Millisecond, limit))
		}
	case err := <-done:
		// Refused (ACL without &channel access, a proxy without sharded
		// pub/sub, a server before 7.0): timer only from now on.
		done <- err
		if _, ok := rueidis.IsRedisErr(err); ok {
			w.noPubSub.Store(true)
		}
	case <-released:
		return nil
	case <-timer.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
	select {
	case <-released:
		return nil
	case <-timer.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
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
