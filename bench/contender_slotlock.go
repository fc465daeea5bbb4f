package bench

import (
	"context"
	"errors"
	"slices"

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
			c := &slotlockContender{env: env, client: client, kind: env.kind}
			prefix := slotlockPrefix(env)
			n := 1
			if perWorker {
				n = workers
			}
			for range n {
				o := slotlock.Options{TTL: TTL, PerSlot: perSlot || env.kind == KindPerSlot, Prefix: prefix}
				l, err := slotlock.New(client, o)
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

// slotlockPrefix is the slotlock key prefix of env's cells: under the
// environment's prefix on a cluster the user already has; slotlock's
// default elsewhere.
func slotlockPrefix(env *Env) string {
	if env.prefix != "" {
		return env.prefix + "slotlock"
	}
	return ""
}

type slotlockContender struct {
	env     *Env
	client  rueidis.Client
	lockers []*slotlock.Locker
	names   slot.Namer
	// kind is the cell's kind of lease (Cell.Kind), "" for Lock.
	kind string
}

func (c *slotlockContender) Acquirer(w int) Acquirer {
	return &slotlockAcquirer{c: c, l: c.lockers[w%len(c.lockers)], w: w}
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
	w int
}

func (a *slotlockAcquirer) Lock(ctx context.Context, keys []string) (Held, error) {
	lease, err := a.l.Lock(ctx, keys...)
	if err != nil {
		return nil, err
	}
	return &slotlockHeld{c: a.c, lease: lease}, nil
}

// Ask takes one request of a kind cell (Cell.Kind) through Acquire, with
// KindWait; a wait that runs out is ErrNotAcquired. owner is the worker's
// owner identity (KindReentrant), names the keyspace's names.
func (a *slotlockAcquirer) Ask(ctx context.Context, ask KindAsk, owner string, name func(int) string) (Held, error) {
	var exclusive, shared []string
	for _, i := range ask.Exclusive {
		exclusive = append(exclusive, name(i))
	}
	for _, i := range ask.Shared {
		shared = append(shared, name(i))
	}
	req := slotlock.Request{Exclusive: exclusive, Shared: shared, Wait: KindWait}
	for _, p := range ask.Permits {
		req.Permits = append(req.Permits, slotlock.Permit{Resource: PermitName(p.Resource), Units: int64(p.Units), Limit: PermitLimit})
	}
	if a.c.kind == KindReentrant {
		ctx = slotlock.WithOwner(ctx, owner)
	}
	lease, err := a.l.Acquire(ctx, req)
	if err != nil {
		return nil, err
	}
	return &slotlockHeld{c: a.c, lease: lease, exclusive: exclusive, shared: shared, asked: true}, nil
}

type slotlockHeld struct {
	c     *slotlockContender
	lease *slotlock.Lease
	// asked: taken by Ask (checkAsked). exclusive and shared are its
	// keys.
	asked             bool
	exclusive, shared []string
}

func (h *slotlockHeld) Check(ctx context.Context) error {
	if h.asked {
		return h.checkAsked(ctx)
	}
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

// checkAsked reads a kind request's keys back: each exclusive key held by
// the lease's token, or for a reentrant lease (whose keys hold an owner
// token derived from a secret of the Locker, which the benchmark cannot
// see) all by one holder; each shared key held shared. Permits are not
// read back: the exclusion witness counts their units.
func (h *slotlockHeld) checkAsked(ctx context.Context) error {
	keys := slices.Concat(h.exclusive, h.shared)
	if len(keys) == 0 {
		return nil
	}
	lockKeys := make([]string, len(keys))
	for i, k := range keys {
		lockKeys[i] = h.c.names.LockKey(k)
	}
	token, holder := h.lease.Token(), ""
	return checkValues(ctx, h.c.env.probe, lockKeys, func(i int, v string, found bool) bool {
		switch {
		case !found:
			return false
		case i >= len(h.exclusive):
			return lockval.IsShared(v)
		case h.c.kind != KindReentrant:
			return lockval.HeldBy(v, token)
		}
		if holder == "" {
			holder = lockval.Holder(v)
		}
		return lockval.HeldBy(v, holder)
	})
}

// errNotAcquired is what Ask returns when a kind request's wait ran out.
var errNotAcquired = slotlock.ErrNotAcquired
