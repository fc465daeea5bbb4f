package bench

import (
	"context"
	"errors"

	"github.com/redis/rueidis"

	"github.com/slotlock/slotlock"
	"github.com/slotlock/slotlock/internal/lockval"
	"github.com/slotlock/slotlock/slot"
)

// slotlockFactory makes the slotlock contenders: one Locker for all workers
// (how the library is meant to be used) or one per worker (separate
// processes: they cannot queue for each other in memory and meet only in
// Redis), with per-node or per-slot scripts.
func slotlockFactory(name string, perSlot, perWorker bool, about string) Factory {
	return Factory{
		Name:  name,
		About: about,
		Safe:  true,
		New: func(env *Env, workers int) (Contender, error) {
			client, err := env.client()
			if err != nil {
				return nil, err
			}
			c := &slotlockContender{env: env, client: client}
			// Under the environment's prefix on a cluster the user
			// already has; slotlock's default elsewhere.
			prefix := ""
			if env.prefix != "" {
				prefix = env.prefix + "slotlock"
			}
			n := 1
			if perWorker {
				n = workers
			}
			for range n {
				l, err := slotlock.New(client, slotlock.Options{TTL: TTL, PerSlot: perSlot, Prefix: prefix})
				if err != nil {
					c.Close()
					return nil, err
				}
				c.lockers = append(c.lockers, l)
			}
			// Check derives the lock key names itself.
			c.names, _ = slot.NewNamer(prefix)
			return c, nil
		},
	}
}

type slotlockContender struct {
	env     *Env
	client  rueidis.Client
	lockers []*slotlock.Locker
	names   slot.Namer
}

func (c *slotlockContender) Acquirer(w int) Acquirer {
	return &slotlockAcquirer{c: c, l: c.lockers[w%len(c.lockers)]}
}

func (c *slotlockContender) Close() error {
	for _, l := range c.lockers {
		l.Close()
	}
	c.client.Close()
	return nil
}

type slotlockAcquirer struct {
	c *slotlockContender
	l *slotlock.Locker
}

func (a *slotlockAcquirer) Lock(ctx context.Context, keys []string) (Held, error) {
	lease, err := a.l.Lock(ctx, keys...)
	if err != nil {
		return nil, err
	}
	return &slotlockHeld{c: a.c, lease: lease}, nil
}

type slotlockHeld struct {
	c     *slotlockContender
	lease *slotlock.Lease
}

func (h *slotlockHeld) Check(ctx context.Context) error {
	keys := h.lease.Keys()
	lockKeys := make([]string, len(keys))
	for i, k := range keys {
		lockKeys[i] = h.c.names.LockKey(k)
	}
	token := h.lease.Token()
	// A waiter may have marked one of our keys with "!" (slotlock's wake-up
	// request): the key is still ours, and lockval.HeldBy says so. A
	// reservation is never a lease's, even one naming its token
	// (docs/design.md, "What slotlock keeps in Redis").
	return checkValues(ctx, h.c.env.probe, lockKeys, func(_ int, v string, found bool) bool {
		return found && lockval.HeldBy(v, token)
	})
}

func (h *slotlockHeld) Release(ctx context.Context) error {
	err := h.lease.Release(ctx)
	if errors.Is(err, slotlock.ErrNotHeld) {
		return errors.Join(ErrNotHeld, err)
	}
	return err
}
