package batch

import (
	"context"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"

	"github.com/slotlock/slotlock/internal/lockval"
	"github.com/slotlock/slotlock/internal/protocol"
	"github.com/slotlock/slotlock/internal/rediserr"
)

// waker lets a waiter sleep until the lock key it needs is released, without
// polling Redis. The acquire script marks the conflicting key ("!"); the
// release script publishes on the sharded channel named like a marked key
// (SPUBLISH lands in the key's own slot, on the node that holds it). The
// waiter subscribes to that channel. Two things can still be missed (a
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

// wait returns when lockKey may have been released: a release message, the
// key found free or unmarked after subscribing, or the fallback timer (at
// most limit). It returns context.Cause(ctx) when ctx ends first. attempt
// counts the waits of one acquisition for this key.
func (w *waker) wait(ctx context.Context, lockKey string, holderTTL time.Duration, attempt int, limit time.Duration) error {
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
		done <- w.client.Receive(hooked, w.client.B().Ssubscribe().Channel(lockKey).Build(), func(rueidis.PubSubMessage) {
			select {
			case released <- struct{}{}:
			default:
			}
		})
	}()
	defer w.unsubscribe(lockKey, cancel, done)

	// Until the subscription is confirmed a release can slip by unheard:
	// once it is, look at the key once. A key that is gone, or no longer
	// carries a waiter's mark (a new holder took it), means: try now.
	select {
	case <-subscribed:
		v, err := w.client.Do(ctx, w.client.B().Get().Key(lockKey).Build()).ToString()
		if rediserr.IsNil(err) || err == nil && !lockval.Marked(v) {
			return nil
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
