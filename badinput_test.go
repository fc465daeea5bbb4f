package slotlock_test

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/slotlock/slotlock"
	"github.com/slotlock/slotlock/slot"
)

// requireNothingLocked fails if any key of the test's prefix is left
// besides the slots' fencing counters (which outlive every lease by
// design: tokens never go back).
func (e *env) requireNothingLocked(what string) {
	e.t.Helper()
	for k, v := range e.lockKeys() {
		require.True(e.t, strings.HasSuffix(k, "}#fence"), "%s: %q = %q left", what, k, v)
	}
}

// TestBadInputMore continues TestBadInputLeavesNothing with the inputs a
// careless caller or operator produces that the types cannot refuse:
// each gives a typed error naming the offender (or, where the input is
// valid after all, works at the boundary), and leaves nothing locked.
// docs/safety.md lists every class with its test.
func TestBadInputMore(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := ctxT(t, 60*time.Second)
	names, err := slot.NewNamer(e.prefix)
	require.NoError(t, err)

	t.Run("lock key of a wrong type", func(t *testing.T) {
		// An operator wrote a hash where a lock key lives. The scripts
		// name the key (Redis's WRONGTYPE does not); the pipeline
		// strategy's SET NX sees a key that exists, with no expiry, and
		// reports it held. Mutation: the acquire script's plain GET
		// (redis.call) gives a WRONGTYPE without the key and fails here.
		lk := names.LockKey("wt")
		require.NoError(t, e.client.Do(ctx, e.client.B().Hset().Key(lk).FieldValue().FieldValue("f", "v").Build()).Error())
		t.Cleanup(func() { e.client.Do(context.Background(), e.client.B().Del().Key(lk).Build()) })
		for _, o := range []slotlock.Options{{}, {PerSlot: true}, {Fencing: true}, {Strategy: slotlock.StrategyLua}} {
			l := e.locker(o)
			for _, keys := range [][]string{{"wt"}, {"wt", "a", "b", "{wt}c"}} {
				_, err := l.TryLock(ctx, keys...)
				require.ErrorIs(t, err, slotlock.ErrRedis, "%+v %v", o, keys)
				var ne *slotlock.NodeError
				require.ErrorAs(t, err, &ne)
				require.ErrorContains(t, err, "WRONGTYPE")
				require.ErrorContains(t, err, lk, "names the lock key")
				_, err = l.Lock(ctxT(t, 5*time.Second), keys...)
				require.ErrorContains(t, err, lk, "Lock too")
				require.Zero(t, l.LocalLen())
			}
		}
		p := e.locker(slotlock.Options{Strategy: slotlock.StrategyPipeline})
		_, err := p.TryLock(ctx, "wt", "a", "b")
		var ce *slotlock.ConflictError
		require.ErrorAs(t, err, &ce)
		require.Equal(t, "wt", ce.Conflicts[0].Key)
		require.Equal(t, time.Duration(-1), ce.Conflicts[0].TTL)
		require.NoError(t, e.client.Do(ctx, e.client.B().Del().Key(lk).Build()).Error())
		e.requireNothingLocked("wrong type")
	})

	t.Run("key of another Locker's prefix", func(t *testing.T) {
		// A user key that is another Locker's lock key is just a user
		// key here: prefixes have no braces and end where the hash tag
		// starts, so two prefixes never name the same lock key.
		a := e.locker(slotlock.Options{TTL: 10 * time.Second})
		other, err := slotlock.New(e.client, slotlock.Options{TTL: 10 * time.Second, Prefix: e.prefix + ":other"})
		require.NoError(t, err)
		t.Cleanup(func() { _ = other.Close() })
		la, err := a.TryLock(ctx, "shared")
		require.NoError(t, err)
		lo, err := other.TryLock(ctx, names.LockKey("shared"), "shared")
		require.NoError(t, err, "another namespace")
		v, err := e.client.Do(ctx, e.client.B().Get().Key(names.LockKey("shared")).Build()).ToString()
		require.NoError(t, err)
		require.Equal(t, la.Token(), v, "a's lock untouched")
		require.NoError(t, lo.Release(ctx))
		require.NoError(t, la.Release(ctx))
		e.requireNothingLocked("other prefix")
	})

	t.Run("cluster behind a non-cluster client", func(t *testing.T) {
		single, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{e.c.Addrs()[0]}, ForceSingleClient: true})
		require.NoError(t, err)
		t.Cleanup(single.Close)
		l, err := slotlock.New(single, slotlock.Options{Prefix: e.prefix})
		require.NoError(t, err)
		t.Cleanup(func() { _ = l.Close() })
		for _, call := range []func() error{
			func() error { _, err := l.TryLock(ctx, keysN("single", 20)...); return err },
			func() error { _, err := l.Lock(ctx, keysN("single", 20)...); return err },
		} {
			err := call()
			require.ErrorIs(t, err, slotlock.ErrClientMode)
			require.ErrorContains(t, err, e.c.Addrs()[0], "names the node")
			require.ErrorContains(t, err, "cluster client")
		}
		require.Zero(t, l.LocalLen())
		e.requireNothingLocked("single client")
	})

	t.Run("prefix of 0 bytes and of 10 KiB", func(t *testing.T) {
		// "" is the default prefix; 10 KiB is valid (Redis keys may be
		// 512 MB) and every lock key carries it.
		for _, p := range []string{"", e.prefix + strings.Repeat("p", 10<<10)} {
			l, err := slotlock.New(e.client, slotlock.Options{Prefix: p, TTL: 10 * time.Second})
			require.NoError(t, err)
			want := p
			if p == "" {
				want = "slotlock"
			}
			n, err := slot.NewNamer(want)
			require.NoError(t, err)
			keys := []string{"pfx:" + e.prefix, "pfx2:" + e.prefix}
			le, err := l.TryLock(ctx, keys...)
			require.NoError(t, err, "prefix of %d bytes", len(p))
			for _, k := range keys {
				v, err := e.client.Do(ctx, e.client.B().Get().Key(n.LockKey(k)).Build()).ToString()
				require.NoError(t, err, "lock key under %.20q...", want)
				require.Equal(t, le.Token(), v)
			}
			_, err = l.TryLock(ctx, keys[1])
			require.ErrorIs(t, err, slotlock.ErrNotAcquired)
			require.NoError(t, le.Release(ctx))
			for _, k := range keys {
				m, err := e.client.Do(ctx, e.client.B().Exists().Key(n.LockKey(k)).Build()).AsInt64()
				require.NoError(t, err)
				require.Zero(t, m)
			}
			require.NoError(t, l.Close())
		}
		e.requireNothingLocked("prefixes")
	})

	t.Run("largest TTL", func(t *testing.T) {
		// PX takes any time.Duration in ms (at most about 9.2e12, far
		// below Redis's limit of LLONG_MAX minus the server's clock, and
		// exact in a Lua number): the largest TTL works, renewal too.
		l := e.locker(slotlock.Options{TTL: math.MaxInt64})
		le, err := l.TryLock(ctx, "forever", "forever2")
		require.NoError(t, err)
		pttl, err := e.client.Do(ctx, e.client.B().Pttl().Key(names.LockKey("forever")).Build()).AsInt64()
		require.NoError(t, err)
		require.Greater(t, pttl, int64(9e12), "PX of the whole TTL")
		require.NoError(t, le.Extend(ctx, math.MaxInt64))
		require.True(t, le.Deadline().After(time.Now().Add(100*365*24*time.Hour)))
		require.NoError(t, le.Release(ctx))
		e.requireNothingLocked("largest TTL")
	})

	t.Run("deadline already past", func(t *testing.T) {
		l := e.locker(slotlock.Options{})
		past, cancel := context.WithDeadline(ctx, time.Now().Add(-time.Second))
		defer cancel()
		_, err := l.Lock(past, "late")
		require.ErrorIs(t, err, context.DeadlineExceeded)
		_, err = l.TryLock(past, "late", "late2")
		require.ErrorIs(t, err, context.DeadlineExceeded)
		err = l.Do(past, []string{"late"}, func(context.Context) error { panic("must not run") })
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.Zero(t, l.LocalLen())
		e.requireNothingLocked("past deadline")
	})

	t.Run("options out of range", func(t *testing.T) {
		// Mutation: dropping the Renew check in withDefaults lets
		// Renew(7) through and fails here.
		for _, tc := range []struct {
			opt  slotlock.Options
			name string
		}{
			{slotlock.Options{Renew: 7}, "Renew 7"},
			{slotlock.Options{Strategy: 9}, "Strategy 9"},
			{slotlock.Options{CleanupTimeout: -time.Second}, "CleanupTimeout -1s"},
			{slotlock.Options{MinReplicas: -1}, "MinReplicas -1"},
			{slotlock.Options{ReplicaTimeout: time.Microsecond}, "ReplicaTimeout 1µs"},
		} {
			_, err := slotlock.New(e.client, tc.opt)
			require.ErrorIs(t, err, slotlock.ErrInvalid, tc.name)
			require.ErrorContains(t, err, tc.name, "names the option and its value")
		}
	})

	t.Run("Do with a nil function", func(t *testing.T) {
		// Mutation: without the check, Do locks and panics with the keys
		// held.
		l := e.locker(slotlock.Options{})
		err := l.Do(ctx, []string{"nilfn"}, nil)
		require.ErrorIs(t, err, slotlock.ErrInvalid)
		require.ErrorContains(t, err, "nil function")
		e.requireNothingLocked("nil fn")
	})
}
