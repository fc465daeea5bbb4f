package slotlock_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/slotlock/slotlock"
	"github.com/slotlock/slotlock/internal/redistest"
	"github.com/slotlock/slotlock/slot"
)

// ownerCheckedPipeline runs the pipeline strategy's owner-checked Extend and
// Release over leases whose keys were tampered with, and checks what every
// server must give, whichever way it does the check (conditional commands
// or transactions): a key carrying a Lua waiter's mark is still the lease's
// (extended, then released), a key another holder took is reported lost and
// left alone, and every other key is extended or deleted. around wraps each
// owner-checked call, for a caller that counts the commands they send.
func ownerCheckedPipeline(t *testing.T, ctx context.Context, e *env, around func(func())) {
	t.Helper()
	names, err := slot.NewNamer(e.prefix)
	require.NoError(t, err)
	l := e.locker(slotlock.Options{TTL: 10 * time.Second, Strategy: slotlock.StrategyPipeline, Renew: slotlock.RenewNever})
	set := func(key, value string, args ...string) {
		t.Helper()
		cmd := e.client.B().Arbitrary("SET").Keys(names.LockKey(key)).Args(append([]string{value}, args...)...).Build()
		require.NoError(t, e.client.Do(ctx, cmd).Error())
	}
	get := func(key string) (string, int64) {
		t.Helper()
		v, err := e.client.Do(ctx, e.client.B().Get().Key(names.LockKey(key)).Build()).ToString()
		if err != nil {
			require.ErrorContains(t, err, "nil", key)
			return "", -2
		}
		ttl, err := e.client.Do(ctx, e.client.B().Pttl().Key(names.LockKey(key)).Build()).AsInt64()
		require.NoError(t, err)
		return v, ttl
	}

	// A: one key marked by a waiter; extend and release take it along.
	keysA := keysN("a", 20)
	a, err := l.Lock(ctx, keysA...)
	require.NoError(t, err)
	set(keysA[3], a.Token()+"!", "KEEPTTL")
	around(func() { require.NoError(t, a.Extend(ctx, time.Minute), "extend A") })
	for _, k := range keysA {
		v, ttl := get(k)
		require.True(t, strings.HasPrefix(v, a.Token()), "%s still A's: %q", k, v)
		require.Greater(t, ttl, int64(50_000), "%s extended", k)
	}
	around(func() { require.NoError(t, a.Release(ctx), "release A") })
	for _, k := range keysA {
		v, _ := get(k)
		require.Empty(t, v, "%s released", k)
	}

	// B: one key taken by someone else; the release reports it lost and
	// leaves it, and deletes the rest.
	keysB := keysN("b", 20)
	b, err := l.Lock(ctx, keysB...)
	require.NoError(t, err)
	set(keysB[5], "intruder", "PX", "60000")
	var lost *slotlock.LostError
	around(func() {
		err := b.Release(ctx)
		require.ErrorIs(t, err, slotlock.ErrNotHeld, "release B")
		require.ErrorAs(t, err, &lost)
	})
	require.Equal(t, []string{keysB[5]}, lost.Keys)
	for i, k := range keysB {
		v, _ := get(k)
		if i == 5 {
			require.Equal(t, "intruder", v)
		} else {
			require.Empty(t, v, "%s released", k)
		}
	}

	// C: the same for an extension: the intruder's expiry is not touched.
	keysC := keysN("c", 20)
	c, err := l.Lock(ctx, keysC...)
	require.NoError(t, err)
	set(keysC[7], "intruder", "PX", "5000")
	around(func() {
		err := c.Extend(ctx, time.Minute)
		require.ErrorIs(t, err, slotlock.ErrNotHeld, "extend C")
		require.ErrorAs(t, err, &lost)
	})
	require.Equal(t, []string{keysC[7]}, lost.Keys)
	v, ttl := get(keysC[7])
	require.Equal(t, "intruder", v)
	require.LessOrEqual(t, ttl, int64(5_000), "the intruder's expiry is its own")
	_ = c.Release(ctx)
	set(keysC[7], "", "PX", "1") // gone within a millisecond
}

// TestPipelineOwnerCheck runs ownerCheckedPipeline on the package's
// cluster, on every server: the property, whatever the server's means.
func TestPipelineOwnerCheck(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t, time.Minute)
	e := newEnv(t)
	ownerCheckedPipeline(t, ctx, e, func(f func()) { f() })
}

// TestPipelineUsesConditionalCommands: where the server has a conditional
// delete (DELEX, Redis 8.4; DELIFEQ, Valkey 9.0) and with it SET ... IFEQ,
// the pipeline strategy's owner-checked Extend and Release use them, and no
// transaction: ownerCheckedPipeline on a cluster of its own, whose masters'
// command counts (INFO commandstats) show what ran. Elsewhere it is NOT RUN
// (skipped, saying why): the strategy uses transactions there, which
// TestPipelineOwnerCheck covers.
func TestPipelineUsesConditionalCommands(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t, 3*time.Minute)
	shared := redistest.Require(t, cluster)
	srv := server(t, ctx, shared)
	var conds []string
	for _, name := range []string{"DELEX", "DELIFEQ"} {
		has, err := shared.HasCommand(ctx, name)
		require.NoError(t, err)
		if has {
			conds = append(conds, strings.ToLower(name))
		}
	}
	if len(conds) == 0 {
		t.Skipf("NOT RUN: %s has neither DELEX (Redis 8.4) nor DELIFEQ (Valkey 9.0); the pipeline strategy uses transactions there (TestPipelineOwnerCheck)", srv)
	}
	t.Logf("%s has %v", srv, conds)
	c := redistest.StartForTest(t, redistest.Options{Replicas: redistest.NoReplicas})
	e := newEnvOn(t, c)
	masters, err := c.Masters(ctx)
	require.NoError(t, err)
	counted := append([]string{"exec", "multi", "watch", "set"}, conds...)
	calls := func() map[string]int64 {
		out := map[string]int64{}
		for _, m := range masters {
			for _, name := range counted {
				out[name] += commandCalls(t, ctx, m, name)
			}
		}
		return out
	}
	delta := map[string]int64{}
	ownerCheckedPipeline(t, ctx, e, func(f func()) {
		before := calls()
		f()
		for name, n := range calls() {
			delta[name] += n - before[name]
		}
	})
	t.Logf("commands of the owner-checked calls: %v", delta)
	require.Zero(t, delta["exec"]+delta["multi"]+delta["watch"], "no transaction")
	var condCalls int64
	for _, name := range conds {
		condCalls += delta[name]
	}
	// Releases of A (20 keys) and B (20): two conditional deletes per key,
	// one for the plain token and one for the token with a waiter's mark.
	require.GreaterOrEqual(t, condCalls, int64(2*40), "conditional deletes")
	// Extensions of A and C: two SET ... IFEQ per key.
	require.GreaterOrEqual(t, delta["set"], int64(2*40), "SET IFEQ")
}
