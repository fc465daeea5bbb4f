package clustertest

import (
	"context"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/redis/rueidis"
)

// delayingClient delivers every pub/sub message of Receive a random 0 to
// max late, each on its own timer: messages overtake each other, and a
// hand-off can arrive after the waiter's next rounds ran (its reservation
// lapsed or given away, the waiter in line again under a newer entry:
// case (b) of docs/proposals/direct-grant.md 2.4). Everything else goes
// to the client unchanged. Deliveries are serialized, as rueidis's are.
type delayingClient struct {
	rueidis.Client
	max time.Duration

	mu sync.Mutex // guards r; and serializes deliveries
	r  *rand.Rand
}

func (c *delayingClient) Receive(ctx context.Context, subscribe rueidis.Completed, fn func(msg rueidis.PubSubMessage)) error {
	return c.Client.Receive(ctx, subscribe, func(m rueidis.PubSubMessage) {
		c.mu.Lock()
		d := time.Duration(c.r.Int64N(int64(c.max) + 1))
		c.mu.Unlock()
		time.AfterFunc(d, func() {
			c.mu.Lock()
			defer c.mu.Unlock()
			fn(m)
		})
	})
}
