package bench

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/go-redsync/redsync/v4"
	redsyncrueidis "github.com/go-redsync/redsync/v4/redis/rueidis"
	"github.com/redis/rueidis"
	"github.com/redis/rueidis/rueidiscompat"

	"github.com/slotlock/slotlock/internal/protocol"
)

// redsyncFactory uses one redsync mutex per key over redsync's rueidis pool
// (one pool: the cluster is one Redis deployment, so the quorum is 1).
// Redsync has no multi-key lock, so the batch is the same loop as
// sequential-setnx: TryLock each mutex in sorted order, unlock all and back
// off on conflict. Its own retry (32 tries, 50-250 ms apart) is left out:
// that delay alone would cap a contended worker at a few batches a second.
var redsyncFactory = Factory{
	Name:  "redsync",
	About: "go-redsync/redsync v4 over rueidiscompat: one mutex per key, TryLock in sorted order, Unlock one by one; rollback and jittered backoff on conflict",
	Safe:  true,
	New: func(env *Env, _ int) (Contender, error) {
		client, err := env.client()
		if err != nil {
			return nil, err
		}
		rs := redsync.New(redsyncrueidis.NewPool(rueidiscompat.NewAdapter(client)))
		return &redsyncContender{env: env, client: client, rs: rs}, nil
	},
}

type redsyncContender struct {
	env    *Env
	client rueidis.Client
	rs     *redsync.Redsync
}

func (c *redsyncContender) Acquirer(int) Acquirer { return c }
func (c *redsyncContender) Close() error          { c.client.Close(); return nil }

func (c *redsyncContender) Lock(ctx context.Context, keys []string) (Held, error) {
	sorted := slices.Clone(keys)
	slices.Sort(sorted)
	for attempt := 0; ; attempt++ {
		held := make([]*redsync.Mutex, 0, len(sorted))
		var err error
		for _, k := range sorted {
			m := c.rs.NewMutex(k, redsync.WithExpiry(TTL), redsync.WithTries(1))
			if err = m.TryLockContext(ctx); err != nil {
				break
			}
			held = append(held, m)
		}
		if err == nil {
			return &redsyncHeld{c: c, mutexes: held}, nil
		}
		for _, m := range held {
			_, _ = m.UnlockContext(ctx)
		}
		var taken *redsync.ErrTaken
		if !errors.As(err, &taken) && !errors.Is(err, redsync.ErrFailed) {
			return nil, err
		}
		if err := protocol.SleepCtx(ctx, backoff(attempt)); err != nil {
			return nil, err
		}
	}
}

type redsyncHeld struct {
	c       *redsyncContender
	mutexes []*redsync.Mutex
}

func (h *redsyncHeld) Check(ctx context.Context) error {
	keys := make([]string, len(h.mutexes))
	for i, m := range h.mutexes {
		keys[i] = m.Name()
	}
	return checkValues(ctx, h.c.env.probe, keys, func(i int, v string, found bool) bool {
		return found && v == h.mutexes[i].Value()
	})
}

func (h *redsyncHeld) Release(ctx context.Context) error {
	lost := 0
	var errs []error
	for _, m := range h.mutexes {
		ok, err := m.UnlockContext(ctx)
		switch {
		case errors.Is(err, redsync.ErrLockAlreadyExpired) || (err == nil && !ok):
			lost++
		case err != nil:
			errs = append(errs, err)
		}
	}
	if lost > 0 {
		errs = append(errs, fmt.Errorf("%w: %d of %d mutexes at unlock", ErrNotHeld, lost, len(h.mutexes)))
	}
	return errors.Join(errs...)
}
