package bench

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis/rueidislock"

	"github.com/slotlock/slotlock/internal/protocol"
)

// rueidislockPrefix is rueidislock's default key prefix (after the
// environment's); with KeyMajority 1 the only key of lock "name" is
// prefix:0:name.
const rueidislockPrefix = "rueidislock"

// rueidislockFactory takes one rueidislock lock per key, in sorted order,
// waiting for each with WithContext (woken by client-side-caching
// invalidations when the holder lets go). Holding earlier keys while
// waiting for a later one cannot deadlock because every worker takes keys
// in the same order.
//
// A rueidislock lock lives as long as the context it was taken with:
// cancelling that context releases it. Locks are therefore taken with the
// run's context, which outlives the batch, and released by calling the
// returned cancel functions, one by one.
var rueidislockFactory = Factory{
	Name:  "rueidislock",
	About: "redis/rueidis/rueidislock, KeyMajority 1: one lock per key, WithContext in sorted order (waits on invalidations), released one by one",
	Safe:  true,
	New: func(env *Env, _ int) (Contender, error) {
		prefix := env.prefix + rueidislockPrefix
		lk, err := rueidislock.NewLocker(rueidislock.LockerOption{
			ClientOption: env.clientOption(),
			KeyPrefix:    prefix,
			KeyMajority:  1,
		})
		if err != nil {
			return nil, err
		}
		return &rueidislockContender{env: env, lk: lk, prefix: prefix}, nil
	},
}

type rueidislockContender struct {
	env    *Env
	lk     rueidislock.Locker
	prefix string
	stalls atomic.Int64
}

func (c *rueidislockContender) Acquirer(int) Acquirer { return c }
func (c *rueidislockContender) Close() error          { c.lk.Close(); return nil }

// Stalls counts the acquisitions given up by the stall guard.
func (c *rueidislockContender) Stalls() int64 { return c.stalls.Load() }

// StallAfter bounds one rueidislock WithContext call. Seen on a loaded
// 2-core machine: when rueidislock's attempt on a free key fails by its own
// 20 ms TryNextAfter timeout (the command may never have been sent),
// WithContext waits for an invalidation of that key, which nothing will
// ever send, and so waits as long as its context lives. A user would put a
// deadline on it and retry; so does the benchmark, and counts it.
const StallAfter = 2 * time.Second

func (c *rueidislockContender) Lock(ctx context.Context, keys []string) (Held, error) {
	sorted := slices.Clone(keys)
	slices.Sort(sorted)
	for attempt := 0; ; attempt++ {
		h := &rueidislockHeld{c: c, keys: sorted}
		stalled := false
		for _, k := range sorted {
			// The lock lives as long as parent: a timeout on the call
			// itself would end the lock too. The guard cancels parent only
			// if the call has not returned in time.
			parent, cancelParent := context.WithCancel(ctx)
			guard := time.AfterFunc(StallAfter, cancelParent)
			lctx, cancel, err := c.lk.WithContext(parent, k)
			if !guard.Stop() {
				if err == nil {
					cancel()
				}
				cancelParent()
				if ctx.Err() != nil {
					h.cancelAll()
					return nil, context.Cause(ctx)
				}
				stalled = true
				break
			}
			if err != nil {
				cancelParent()
				h.cancelAll()
				return nil, fmt.Errorf("rueidislock %s: %w", k, err)
			}
			h.ctxs = append(h.ctxs, lctx)
			h.cancels = append(h.cancels, func() { cancel(); cancelParent() })
		}
		if !stalled {
			return h, nil
		}
		c.stalls.Add(1)
		h.cancelAll()
		if err := protocol.SleepCtx(ctx, backoff(attempt)); err != nil {
			return nil, err
		}
	}
}

type rueidislockHeld struct {
	c       *rueidislockContender
	keys    []string
	ctxs    []context.Context
	cancels []context.CancelFunc
}

func (h *rueidislockHeld) cancelAll() {
	for _, cancel := range h.cancels {
		cancel()
	}
}

// Check asks the library first (a lock whose context ended is lost), then
// Redis: rueidislock's values are random bytes it does not expose, so the
// key must exist, which rules out a lock released by a cancelled context.
func (h *rueidislockHeld) Check(ctx context.Context) error {
	for i, lctx := range h.ctxs {
		if lctx.Err() != nil {
			return fmt.Errorf("%w: rueidislock context of %s ended: %v", ErrNotHeld, h.keys[i], context.Cause(lctx))
		}
	}
	lockKeys := make([]string, len(h.keys))
	for i, k := range h.keys {
		lockKeys[i] = h.c.prefix + ":0:" + k
	}
	return checkValues(ctx, h.c.env.probe, lockKeys, func(_ int, _ string, found bool) bool { return found })
}

// Release reads the library's own verdict (the lock's context is cancelled
// as soon as rueidislock learns it lost the key) before giving each lock
// back; cancel returns once the key is deleted.
func (h *rueidislockHeld) Release(context.Context) error {
	lost := 0
	for _, lctx := range h.ctxs {
		if lctx.Err() != nil {
			lost++
		}
	}
	h.cancelAll()
	if lost > 0 {
		return fmt.Errorf("%w: %d of %d rueidislock contexts ended before release", ErrNotHeld, lost, len(h.keys))
	}
	return nil
}
