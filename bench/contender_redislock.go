package bench

import (
	"context"
	"errors"
	"fmt"

	"github.com/bsm/redislock"
	goredis "github.com/redis/go-redis/v9"

	"github.com/slotlock/slotlock/internal/protocol"
	"github.com/slotlock/slotlock/slot"
)

// redislockFactory uses bsm/redislock's ObtainMulti, one call per hash slot
// (its script declares all its keys, so they must share a slot): keys are
// grouped by slot with the slot package and the groups obtained in
// canonical (slot) order; on conflict every group taken is released and the
// batch retried after a jittered backoff. It needs a go-redis client.
var redislockFactory = Factory{
	Name:  "redislock",
	About: "bsm/redislock v0.10.0 over a go-redis v9 ClusterClient: ObtainMulti per slot group in slot order, Release one by one; rollback and jittered backoff on conflict",
	Safe:  true,
	New: func(env *Env, _ int) (Contender, error) {
		rc := env.goRedis()
		return &redislockContender{env: env, rc: rc, client: redislock.New(rc)}, nil
	},
}

type redislockContender struct {
	env    *Env
	rc     *goredis.ClusterClient
	client *redislock.Client
}

func (c *redislockContender) Acquirer(int) Acquirer { return c }
func (c *redislockContender) Close() error          { return c.rc.Close() }

func (c *redislockContender) Lock(ctx context.Context, keys []string) (Held, error) {
	var groups [][]string
	slot.SlotRuns(slot.Sorted(keys), func(_ uint16, run []slot.Key) bool {
		g := make([]string, len(run))
		for i, k := range run {
			g[i] = k.Name
		}
		groups = append(groups, g)
		return true
	})
	for attempt := 0; ; attempt++ {
		h := &redislockHeld{c: c, locks: make([]*redislock.Lock, 0, len(groups))}
		var err error
		for _, g := range groups {
			var l *redislock.Lock
			if l, err = c.client.ObtainMulti(ctx, g, TTL, nil); err != nil {
				break
			}
			h.locks = append(h.locks, l)
		}
		if err == nil {
			return h, nil
		}
		for _, l := range h.locks {
			_ = l.Release(ctx)
		}
		if !errors.Is(err, redislock.ErrNotObtained) {
			return nil, err
		}
		if err := protocol.SleepCtx(ctx, backoff(attempt)); err != nil {
			return nil, err
		}
	}
}

type redislockHeld struct {
	c     *redislockContender
	locks []*redislock.Lock
}

func (h *redislockHeld) Check(ctx context.Context) error {
	var keys, tokens []string
	for _, l := range h.locks {
		for _, k := range l.Keys() {
			keys = append(keys, k)
			tokens = append(tokens, l.Token())
		}
	}
	return checkValues(ctx, h.c.env.probe, keys, func(i int, v string, found bool) bool {
		return found && v == tokens[i]
	})
}

func (h *redislockHeld) Release(ctx context.Context) error {
	lost := 0
	var errs []error
	for _, l := range h.locks {
		switch err := l.Release(ctx); {
		case errors.Is(err, redislock.ErrLockNotHeld):
			lost++
		case err != nil:
			errs = append(errs, err)
		}
	}
	if lost > 0 {
		errs = append(errs, fmt.Errorf("%w: %d of %d slot groups at release", ErrNotHeld, lost, len(h.locks)))
	}
	return errors.Join(errs...)
}
