package slotlock_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/slotlock/slotlock"
	"github.com/slotlock/slotlock/batch"
	"github.com/slotlock/slotlock/internal/lockval"
	"github.com/slotlock/slotlock/slot"
)

func keysN(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s:%d", prefix, i)
	}
	return out
}

func TestLockHoldsEveryKeyWithToken(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			l := e.locker(slotlock.Options{TTL: 10 * time.Second, PerSlot: m.perSlot})
			ctx := ctxT(t, 30*time.Second)
			keys := keysN("order", 300)
			keys = append(keys, keys[:20]...) // duplicates collapse
			lease, err := l.Lock(ctx, keys...)
			require.NoError(t, err)
			require.Len(t, lease.Keys(), 300)
			require.Equal(t, m.perSlot, l.PerSlot())

			names, err := slot.NewNamer(e.prefix)
			require.NoError(t, err)
			held := e.lockKeys()
			require.Len(t, held, 300)
			for _, k := range lease.Keys() {
				require.Equal(t, lease.Token(), held[names.LockKey(k)], "key %q", k)
			}
			// Server-side expiry is set on every key, no longer than the TTL.
			for _, k := range lease.Keys()[:10] {
				pttl, err := e.client.Do(ctx, e.client.B().Pttl().Key(names.LockKey(k)).Build()).AsInt64()
				require.NoError(t, err)
				require.Greater(t, pttl, int64(0))
				require.LessOrEqual(t, pttl, int64(10_000))
			}
			require.WithinDuration(t, time.Now().Add(10*time.Second), lease.Deadline(), 2*time.Second)
			require.Len(t, lease.Token(), 22) // 128 bits, base64url

			require.NoError(t, lease.Release(ctx))
			require.Empty(t, e.lockKeys())
			require.NoError(t, lease.Release(ctx), "release is idempotent")
			require.Zero(t, l.LocalLen())
		})
	}
}

func TestTryLockIsAllOrNothing(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			holder := e.locker(slotlock.Options{TTL: 10 * time.Second, PerSlot: m.perSlot})
			l := e.locker(slotlock.Options{TTL: 10 * time.Second, PerSlot: m.perSlot})
			var failed []string
			l.SetAfterFailure(func(token string, _ error) { failed = append(failed, token) })
			ctx := ctxT(t, 30*time.Second)

			keys := keysN("item", 500) // spread over every node
			held := []string{keys[7], keys[250], keys[499]}
			hl, err := holder.TryLock(ctx, held...)
			require.NoError(t, err)

			_, err = l.TryLock(ctx, keys...)
			require.ErrorIs(t, err, slotlock.ErrNotAcquired)
			var ce *slotlock.ConflictError
			require.ErrorAs(t, err, &ce)
			var named []string
			for _, c := range ce.Conflicts {
				named = append(named, c.Key)
				assert.Greater(t, c.TTL, time.Duration(0))
				assert.LessOrEqual(t, c.TTL, 10*time.Second)
			}
			assert.ElementsMatch(t, held, named, "the error names exactly the held keys")
			require.Len(t, failed, 1)
			e.requireNoneWith(failed[0])
			assert.Len(t, e.lockKeys(), 3, "only the holder's keys are locked")

			require.NoError(t, hl.Release(ctx))
			lease, err := l.TryLock(ctx, keys...)
			require.NoError(t, err)
			require.NoError(t, lease.Release(ctx))
			require.Empty(t, e.lockKeys())
		})
	}
}

func TestLocalConflictIsReportedWithoutRedis(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	l := e.locker(slotlock.Options{TTL: 10 * time.Second})
	ctx := ctxT(t, 30*time.Second)
	a, err := l.Lock(ctx, "a", "b")
	require.NoError(t, err)
	_, err = l.TryLock(ctx, "b", "c")
	var ce *slotlock.ConflictError
	require.ErrorAs(t, err, &ce)
	require.Len(t, ce.Conflicts, 1)
	assert.Equal(t, "b", ce.Conflicts[0].Key)
	assert.True(t, ce.Conflicts[0].Local)
	assert.Contains(t, err.Error(), `"b"`)
	require.NoError(t, a.Release(ctx))
	require.Empty(t, e.lockKeys())
}

func TestBadInputLeavesNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := ctxT(t, 30*time.Second)
	l := e.locker(slotlock.Options{MaxKeys: 10})
	done, cancel := context.WithCancel(ctx)
	cancel()

	tests := []struct {
		name string
		call func() error
		want error
	}{
		{"no keys", func() error { _, err := l.Lock(ctx); return err }, slotlock.ErrInvalid},
		{"no keys try", func() error { _, err := l.TryLock(ctx); return err }, slotlock.ErrInvalid},
		{"empty key", func() error { _, err := l.Lock(ctx, "a", ""); return err }, slotlock.ErrInvalid},
		{"too many keys", func() error { _, err := l.Lock(ctx, keysN("k", 11)...); return err }, slotlock.ErrInvalid},
		{"ctx done", func() error { _, err := l.Lock(done, "a"); return err }, context.Canceled},
		{"ctx done try", func() error { _, err := l.TryLock(done, "a"); return err }, context.Canceled},
		{"do ctx done", func() error {
			return l.Do(done, []string{"a"}, func(context.Context) error { panic("must not run") })
		}, context.Canceled},
		{"nil client", func() error { _, err := slotlock.New(nil, slotlock.Options{}); return err }, slotlock.ErrInvalid},
		{"negative TTL", func() error { _, err := slotlock.New(e.client, slotlock.Options{TTL: -time.Second}); return err }, slotlock.ErrInvalid},
		{"TTL below 1ms", func() error { _, err := slotlock.New(e.client, slotlock.Options{TTL: time.Microsecond}); return err }, slotlock.ErrInvalid},
		{"prefix with brace", func() error { _, err := slotlock.New(e.client, slotlock.Options{Prefix: "a{"}); return err }, slotlock.ErrInvalid},
		{"negative MaxKeys", func() error { _, err := slotlock.New(e.client, slotlock.Options{MaxKeys: -1}); return err }, slotlock.ErrInvalid},
		{"pipeline with fencing", func() error {
			_, err := slotlock.New(e.client, slotlock.Options{Strategy: slotlock.StrategyPipeline, Fencing: true})
			return err
		}, slotlock.ErrInvalid},
		{"pipeline per slot", func() error {
			_, err := slotlock.New(e.client, slotlock.Options{Strategy: slotlock.StrategyPipeline, PerSlot: true})
			return err
		}, slotlock.ErrInvalid},
		{"warn without replicas", func() error {
			_, err := slotlock.New(e.client, slotlock.Options{WarnOnReplicas: true})
			return err
		}, slotlock.ErrInvalid},
	}
	for _, tt := range tests {
		err := tt.call()
		require.ErrorIs(t, err, tt.want, tt.name)
		require.True(t, strings.HasPrefix(err.Error(), "slotlock:"), "%s: %q", tt.name, err)
	}
	// Option refusals name both options.
	_, err := slotlock.New(e.client, slotlock.Options{Strategy: slotlock.StrategyPipeline, Fencing: true})
	require.ErrorContains(t, err, "Fencing")
	require.ErrorContains(t, err, "pipeline")
	lease, err := l.Lock(ctx, "a")
	require.NoError(t, err)
	require.ErrorIs(t, lease.Extend(ctx, 0), slotlock.ErrInvalid)
	require.NoError(t, lease.Release(ctx))
	require.ErrorIs(t, lease.Extend(ctx, time.Second), slotlock.ErrNotHeld)

	require.NoError(t, l.Close())
	_, err = l.Lock(ctx, "a")
	require.ErrorIs(t, err, slotlock.ErrClosed)
	require.Empty(t, e.lockKeys())
	require.Zero(t, l.LocalLen())
}

func TestAwkwardKeys(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			l := e.locker(slotlock.Options{TTL: 10 * time.Second, PerSlot: m.perSlot})
			other := e.locker(slotlock.Options{TTL: 10 * time.Second, PerSlot: m.perSlot})
			ctx := ctxT(t, 60*time.Second)
			big := strings.Repeat("x", 1<<20)
			keys := []string{
				"{user1000}.following", "{user1000}.followers", "foo{}{bar}", "foo{{bar}}zap",
				"a}b", "}{", "{", "}", "\x00\xff\xfe binary \x01", "ключ", big, big + "{tag}",
			}
			lease, err := l.Lock(ctx, keys...)
			require.NoError(t, err)
			require.Len(t, e.lockKeys(), len(keys))
			for _, k := range keys {
				_, err := other.TryLock(ctx, k)
				require.ErrorIs(t, err, slotlock.ErrNotAcquired, "key %.40q", k)
			}
			require.NoError(t, lease.Release(ctx))
			require.Empty(t, e.lockKeys())
			for _, k := range keys {
				le, err := other.TryLock(ctx, k)
				require.NoError(t, err, "key %.40q", k)
				require.NoError(t, le.Release(ctx))
			}
		})
	}
}

func TestLockKeysLandInTheUserKeysSlot(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	l := e.locker(slotlock.Options{TTL: 20 * time.Second})
	ctx := ctxT(t, 60*time.Second)
	keys := keysN("acct", 300)
	lease, err := l.Lock(ctx, keys...)
	require.NoError(t, err)
	defer lease.Release(ctx)
	names, _ := slot.NewNamer(e.prefix)

	// The per-node script writes keys it did not declare: check that the
	// master AND its replica index each one under the user key's slot.
	replicas, err := e.c.Replicas(ctx)
	require.NoError(t, err)
	require.NotEmpty(t, replicas)
	for _, k := range keys {
		lk, s := names.LockKey(k), slot.KeySlot(k)
		server, err := e.client.Do(ctx, e.client.B().ClusterKeyslot().Key(lk).Build()).AsInt64()
		require.NoError(t, err)
		require.Equal(t, int64(s), server)
		owner, err := e.c.NodeForSlot(ctx, s)
		require.NoError(t, err)
		inSlot, err := owner.Do(ctx, "CLUSTER", "GETKEYSINSLOT", fmt.Sprint(s), "1000").AsStrSlice()
		require.NoError(t, err)
		require.Contains(t, inSlot, lk, "master %s, slot %d", owner.Addr(), s)
		for _, r := range replicas {
			if !replicates(ctx, r, owner) {
				continue
			}
			require.Eventually(t, func() bool {
				inSlot, err := r.Do(ctx, "CLUSTER", "GETKEYSINSLOT", fmt.Sprint(s), "1000").AsStrSlice()
				return err == nil && slices.Contains(inSlot, lk)
			}, 10*time.Second, 5*time.Millisecond, "replica %s, slot %d, key %q", r.Addr(), s, lk)
		}
	}
}

func replicates(ctx context.Context, replica interface {
	Do(context.Context, ...string) rueidis.RedisResult
}, master interface{ Addr() string }) bool {
	info, err := replica.Do(ctx, "INFO", "replication").ToString()
	if err != nil {
		return false
	}
	port := master.Addr()[strings.LastIndexByte(master.Addr(), ':')+1:]
	return strings.Contains(info, "master_port:"+port+"\r\n")
}

func TestReleaseAfterExpiryLeavesTheNewOwner(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			short := e.locker(slotlock.Options{TTL: 50 * time.Millisecond, Renew: slotlock.RenewNever, PerSlot: m.perSlot})
			long := e.locker(slotlock.Options{TTL: 10 * time.Second, PerSlot: m.perSlot})
			ctx := ctxT(t, 30*time.Second)
			keys := keysN("exp", 30)
			a, err := short.Lock(ctx, keys...)
			require.NoError(t, err)
			// Lock waits for a's keys to expire in Redis: it is woken by
			// its timer at the holder's remaining TTL.
			b, err := long.Lock(ctx, keys[10:]...)
			require.NoError(t, err)
			err = a.Release(ctx)
			require.ErrorIs(t, err, slotlock.ErrNotHeld)
			var le *slotlock.LostError
			require.ErrorAs(t, err, &le)
			require.Len(t, le.Keys, 30, "expired, and taken by b")
			held := e.lockKeys()
			require.Len(t, held, 20)
			for _, v := range held {
				// b waited: held, or granted directly and still its reservation.
				require.True(t, lockval.HeldBy(v, b.Token()), "%q is not b's", v)
			}
			require.ErrorIs(t, a.Extend(ctx, time.Second), slotlock.ErrNotHeld)
			require.NoError(t, b.Release(ctx))
			require.Empty(t, e.lockKeys())
		})
	}
}

func TestExtend(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	l := e.locker(slotlock.Options{TTL: 2 * time.Second, Renew: slotlock.RenewNever})
	requireExtendThenLoss(t, e, l, ctxT(t, 30*time.Second))
}

func TestDo(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	l := e.locker(slotlock.Options{TTL: 10 * time.Second})
	other := e.locker(slotlock.Options{TTL: 10 * time.Second})
	ctx := ctxT(t, 30*time.Second)
	boom := errors.New("boom")
	ran := false
	err := l.Do(ctx, []string{"x", "y"}, func(ctx context.Context) error {
		ran = true
		_, err := other.TryLock(ctx, "y")
		require.ErrorIs(t, err, slotlock.ErrNotAcquired, "keys are held while fn runs")
		require.Len(t, e.lockKeys(), 2)
		return boom
	})
	require.True(t, ran)
	require.ErrorIs(t, err, boom)
	require.Empty(t, e.lockKeys(), "released although fn failed")
}

func TestCancelDuringWaitLeavesNothing(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			holder := e.locker(slotlock.Options{TTL: 20 * time.Second, PerSlot: m.perSlot})
			waiter := e.locker(slotlock.Options{TTL: 20 * time.Second, PerSlot: m.perSlot})
			var failed []string
			waiter.SetAfterFailure(func(token string, _ error) { failed = append(failed, token) })
			ctx := ctxT(t, 30*time.Second)
			keys := keysN("cw", 200)
			h, err := holder.Lock(ctx, keys[100])
			require.NoError(t, err)

			wctx, cancel := context.WithCancel(ctx)
			errc := make(chan error, 1)
			go func() {
				_, err := waiter.Lock(wctx, keys...)
				errc <- err
			}()
			// Wait until the waiter visibly waits: it has marked the
			// holder's key.
			names, _ := slot.NewNamer(e.prefix)
			require.Eventually(t, func() bool {
				v, _ := e.client.Do(ctx, e.client.B().Get().Key(names.LockKey(keys[100])).Build()).ToString()
				return strings.HasSuffix(v, "!")
			}, 10*time.Second, time.Millisecond)
			cancel()
			require.ErrorIs(t, <-errc, context.Canceled)
			require.Len(t, failed, 1)
			e.requireNoneWith(failed[0])
			require.Len(t, e.lockKeys(), 1, "only the holder's key")
			require.NoError(t, h.Release(ctx))
			require.Empty(t, e.lockKeys())
			require.Zero(t, waiter.LocalLen())
		})
	}
}

// TestBigBatchSplitsCalls: a node's keys beyond batch.MaxCallKeys go in
// several script calls of one round trip, so that no call holds a node for
// long (BenchmarkOthersStall). The batch stays all or nothing: a key held
// in the middle of a later call fails TryLock with nothing left, and Lock
// waits for it and then holds every key.
func TestBigBatchSplitsCalls(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			ctx := ctxT(t, 60*time.Second)
			l := e.locker(slotlock.Options{PerSlot: m.perSlot})
			other := e.locker(slotlock.Options{})
			// Keys of one slot (a shared hash tag), so that per-slot mode
			// has a call to split too: 3 calls of one node.
			keys := keysN("{big}k", 3*batch.MaxCallKeys)
			blocker, err := other.Lock(ctx, keys[2*batch.MaxCallKeys+7])
			require.NoError(t, err)

			before := e.scriptCalls(ctx)
			_, err = l.TryLock(ctx, keys...)
			require.ErrorIs(t, err, slotlock.ErrNotAcquired)
			var ce *slotlock.ConflictError
			require.ErrorAs(t, err, &ce)
			require.Equal(t, keys[2*batch.MaxCallKeys+7], ce.Conflicts[0].Key)
			require.Len(t, e.lockKeys(), 1, "only the blocker's key: the calls that took theirs were rolled back")
			// The attempt sends 3 calls; the first two take their keys
			// (each call is all or nothing by itself), so the rollback
			// sends 2. Without the split: 1 call, nothing to roll back.
			require.GreaterOrEqual(t, e.scriptCalls(ctx)-before, int64(3+2))

			got := lockInBackground(ctx, l, keys...)
			require.NoError(t, blocker.Release(ctx))
			require.NoError(t, <-got)
			require.Empty(t, e.lockKeys())
		})
	}
}
