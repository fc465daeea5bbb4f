package bench

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"

	"github.com/redis/rueidis"

	"github.com/slotlock/slotlock/internal/protocol"
	"github.com/slotlock/slotlock/internal/rediserr"
)

// rawFactory is the ceiling: every SET NX PX of the batch in one DoMulti
// (rueidis sends each node its share in parallel), every DEL in another.
// It is not a lock library: DEL is not owner-checked, so after an expiry it
// would delete someone else's lock. On conflict it deletes what it set and
// retries after the same jittered backoff as the others, so that it stays
// mutually exclusive in the contended cell.
var rawFactory = Factory{
	Name:  "raw-pipeline",
	About: "ceiling, no safety: all SET NX PX in one DoMulti, all DEL in another (no owner check)",
	Safe:  false,
	New: func(env *Env, _ int) (Contender, error) {
		client, err := env.client()
		if err != nil {
			return nil, err
		}
		return &rawContender{env: env, client: client}, nil
	},
}

type rawContender struct {
	env    *Env
	client rueidis.Client
	seq    atomic.Uint64
}

func (c *rawContender) Acquirer(int) Acquirer { return c }
func (c *rawContender) Close() error          { c.client.Close(); return nil }

func (c *rawContender) Lock(ctx context.Context, keys []string) (Held, error) {
	// A counter, not random bits: the ceiling pays for nothing it does not
	// need. It still tells batches apart for Check.
	token := "raw:" + strconv.FormatUint(c.seq.Add(1), 36)
	err := setAllNX(ctx, c.client, keys, token, func(ctx context.Context, got []string) error {
		_, err := c.del(ctx, got)
		return err
	})
	if err != nil {
		return nil, err
	}
	return &rawHeld{c: c, keys: keys, token: token}, nil
}

// setAllNX is the pipelines' lock (raw and checked): SET NX PX of every
// key in one DoMulti; when some are held, giveBack the ones it got and try
// again after a backoff, until all are taken, a command fails or ctx ends.
func setAllNX(ctx context.Context, client rueidis.Client, keys []string, token string, giveBack func(context.Context, []string) error) error {
	cmds := make(rueidis.Commands, len(keys))
	for attempt := 0; ; attempt++ {
		for i, k := range keys {
			cmds[i] = client.B().Set().Key(k).Value(token).Nx().PxMilliseconds(TTL.Milliseconds()).Build()
		}
		var got []string
		var firstErr error
		for i, r := range client.DoMulti(ctx, cmds...) {
			switch err := r.Error(); {
			case err == nil:
				got = append(got, keys[i])
			case rediserr.IsNil(err):
			case firstErr == nil:
				firstErr = fmt.Errorf("SET %s NX: %w", keys[i], err)
			}
		}
		if len(got) == len(keys) {
			return nil
		}
		if len(got) > 0 {
			if err := giveBack(ctx, got); err != nil && firstErr == nil {
				firstErr = err
			}
		}
		if firstErr != nil {
			return firstErr
		}
		if err := protocol.SleepCtx(ctx, backoff(attempt)); err != nil {
			return err
		}
	}
}

// del deletes keys in one DoMulti and returns how many existed.
func (c *rawContender) del(ctx context.Context, keys []string) (int, error) {
	cmds := make(rueidis.Commands, len(keys))
	for i, k := range keys {
		cmds[i] = c.client.B().Del().Key(k).Build()
	}
	n := 0
	for i, r := range c.client.DoMulti(ctx, cmds...) {
		d, err := r.AsInt64()
		if err != nil {
			return n, fmt.Errorf("DEL %s: %w", keys[i], err)
		}
		n += int(d)
	}
	return n, nil
}

type rawHeld struct {
	c     *rawContender
	keys  []string // the worker's slice: valid until its next batch
	token string
}

func (h *rawHeld) Check(ctx context.Context) error {
	return checkValues(ctx, h.c.env.probe, h.keys, func(_ int, v string, found bool) bool {
		return found && v == h.token
	})
}

// Release can only see that every key still existed (DEL counts them): the
// ceiling does not check owners.
func (h *rawHeld) Release(ctx context.Context) error {
	n, err := h.c.del(ctx, h.keys)
	if err != nil {
		return err
	}
	if n != len(h.keys) {
		return fmt.Errorf("%w: DEL found %d of %d keys", ErrNotHeld, n, len(h.keys))
	}
	return nil
}
