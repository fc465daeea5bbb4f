package bench

import (
	"context"
	"crypto/sha1"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/redis/rueidis"

	"github.com/slotlock/slotlock/internal/protocol"
	"github.com/slotlock/slotlock/internal/rediserr"
)

//go:embed scripts/release.lua
var releaseLua string

var releaseSHA = func() string {
	sum := sha1.Sum([]byte(releaseLua))
	return hex.EncodeToString(sum[:])
}()

// setnxFactory is the pattern of blog posts and of Redisson's MultiLock:
// SET key token NX PX ttl one key after the other; at the first key held by
// someone else give back what was taken and retry the whole batch after a
// jittered backoff. Releases (and rollbacks) send the owner-checked script
// for every key in one pipelined round trip, as Redisson's MultiLock
// unlocks all its locks at once.
var setnxFactory = Factory{
	Name:  "sequential-setnx",
	About: "hand-written: SET NX PX per key in sorted order, one round trip each; rollback and jittered backoff on conflict; owner-checked Lua release of all keys in one pipeline",
	Safe:  true,
	New: func(env *Env, _ int) (Contender, error) {
		client, err := env.client()
		if err != nil {
			return nil, err
		}
		return &setnxContender{env: env, client: client, ttl: strconv.FormatInt(TTL.Milliseconds(), 10)}, nil
	},
}

type setnxContender struct {
	env    *Env
	client rueidis.Client
	ttl    string
}

func (c *setnxContender) Acquirer(int) Acquirer { return c }
func (c *setnxContender) Close() error          { c.client.Close(); return nil }

func (c *setnxContender) Lock(ctx context.Context, keys []string) (Held, error) {
	sorted := slices.Clone(keys)
	slices.Sort(sorted)
	token := newToken()
	for attempt := 0; ; attempt++ {
		n, err := c.take(ctx, sorted, token)
		if n == len(sorted) && err == nil {
			return &setnxHeld{c: c, keys: sorted, token: token}, nil
		}
		if _, rerr := c.release(ctx, sorted[:n], token); rerr != nil {
			err = errors.Join(err, rerr)
		}
		if err != nil {
			return nil, err
		}
		if err := protocol.SleepCtx(ctx, backoff(attempt)); err != nil {
			return nil, err
		}
	}
}

// take sets keys in order until one is held by someone else; it returns
// how many it set.
func (c *setnxContender) take(ctx context.Context, keys []string, token string) (int, error) {
	for i, k := range keys {
		err := c.client.Do(ctx, c.client.B().Set().Key(k).Value(token).Nx().PxMilliseconds(TTL.Milliseconds()).Build()).Error()
		if rediserr.IsNil(err) {
			return i, nil
		}
		if err != nil {
			return i, fmt.Errorf("SET %s NX: %w", k, err)
		}
	}
	return len(keys), nil
}

// release runs the owner-checked release script for every key in one
// pipeline and returns how many keys were not ours.
func (c *setnxContender) release(ctx context.Context, keys []string, token string) (lost int, err error) {
	if len(keys) == 0 {
		return 0, nil
	}
	res := evalMulti(ctx, c.client, releaseLua, releaseSHA, keys, token)
	for i, r := range res {
		n, err := r.AsInt64()
		if err != nil {
			return lost, fmt.Errorf("release %s: %w", keys[i], err)
		}
		if n != 1 {
			lost++
		}
	}
	return lost, nil
}

// evalMulti runs a one-key script on every key in one DoMulti, as EVALSHA,
// resending as EVAL the calls whose node has not cached the script yet.
// (rueidis' Lua.ExecMulti would load the script on every node first, on
// every call.)
func evalMulti(ctx context.Context, client rueidis.Client, src, sha string, keys []string, args ...string) []rueidis.RedisResult {
	cmds := make(rueidis.Commands, len(keys))
	for i, k := range keys {
		cmds[i] = client.B().Evalsha().Sha1(sha).Numkeys(1).Key(k).Arg(args...).Build()
	}
	res := client.DoMulti(ctx, cmds...)
	var again []int
	for i, r := range res {
		if re, ok := rueidis.IsRedisErr(r.Error()); ok && re.IsNoScript() {
			again = append(again, i)
		}
	}
	if len(again) > 0 {
		cmds = cmds[:0]
		for _, i := range again {
			cmds = append(cmds, client.B().Eval().Script(src).Numkeys(1).Key(keys[i]).Arg(args...).Build())
		}
		for j, r := range client.DoMulti(ctx, cmds...) {
			res[again[j]] = r
		}
	}
	return res
}

type setnxHeld struct {
	c     *setnxContender
	keys  []string
	token string
}

func (h *setnxHeld) Check(ctx context.Context) error {
	return checkValues(ctx, h.c.env.probe, h.keys, func(_ int, v string, found bool) bool {
		return found && v == h.token
	})
}

func (h *setnxHeld) Release(ctx context.Context) error {
	lost, err := h.c.release(ctx, h.keys, h.token)
	if err != nil {
		return err
	}
	if lost > 0 {
		return fmt.Errorf("%w: %d of %d keys at release", ErrNotHeld, lost, len(h.keys))
	}
	return nil
}
