package slotlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/slotlock/slotlock"
	"github.com/slotlock/slotlock/slot"
)

// requireLost waits for lease to end (bounded by within) and checks that it
// ended as lost, naming exactly want, with every Lease.Context cancelled
// with cause ErrLeaseLost. It returns how long the end took from since.
func requireLost(t *testing.T, lease *slotlock.Lease, lctx context.Context, since time.Time, within time.Duration, want ...string) time.Duration {
	t.Helper()
	select {
	case <-lease.Done():
	case <-time.After(within):
		t.Fatalf("lease still alive %v after the event (err %v)", within, lease.Err())
	}
	took := time.Since(since)
	<-lctx.Done()
	require.ErrorIs(t, context.Cause(lctx), slotlock.ErrLeaseLost)
	var le *slotlock.LostError
	require.ErrorAs(t, lease.Err(), &le)
	require.Equal(t, want, le.Keys)
	return took
}

// requireRegistered waits until the tracker of l has found n keys held,
// which registered them on its connections.
func requireRegistered(t *testing.T, l *slotlock.Locker, n int64) {
	t.Helper()
	require.Eventually(t, func() bool { return l.LossStats().Held >= n }, 10*time.Second, time.Millisecond,
		"registered %d of %d keys", l.LossStats().Held, n)
}

// TestLossIsSeenAtOnce: an operator's DEL of one key among 1,000, and a SET
// that gives a key to someone else, end the lease within a second, where
// the watchdog (TTL 60 s: renewal every 20 s) would take up to 20 s. The
// lease and the context name the key.
func TestLossIsSeenAtOnce(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		opt   slotlock.Options
		write func(e *env, ctx context.Context, lockKey string) error
	}{
		{"DEL", slotlock.Options{TTL: time.Minute, Renew: slotlock.RenewAlways},
			func(e *env, ctx context.Context, k string) error {
				return e.client.Do(ctx, e.client.B().Del().Key(k).Build()).Error()
			}},
		{"SET by another", slotlock.Options{TTL: time.Minute, Renew: slotlock.RenewAlways},
			func(e *env, ctx context.Context, k string) error {
				return e.client.Do(ctx, e.client.B().Set().Key(k).Value("someone-else").Build()).Error()
			}},
		{"DEL, pipeline strategy", slotlock.Options{TTL: time.Minute, Renew: slotlock.RenewAlways, Strategy: slotlock.StrategyPipeline},
			func(e *env, ctx context.Context, k string) error {
				return e.client.Do(ctx, e.client.B().Del().Key(k).Build()).Error()
			}},
		{"DEL, reentrant", slotlock.Options{TTL: time.Minute, Renew: slotlock.RenewAlways},
			func(e *env, ctx context.Context, k string) error {
				return e.client.Do(ctx, e.client.B().Del().Key(k).Build()).Error()
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			l := e.locker(tc.opt)
			ctx := ctxT(t, 60*time.Second)
			if tc.name == "DEL, reentrant" {
				ctx = slotlock.WithOwner(ctx, "worker-1")
			}
			lease, err := l.Lock(ctx, keysN("seen", 1000)...)
			require.NoError(t, err)
			lctx, cancel := lease.Context(ctx)
			defer cancel()
			requireRegistered(t, l, 1000)
			names, _ := slot.NewNamer(e.prefix)
			victim := lease.Keys()[617]
			at := time.Now()
			require.NoError(t, tc.write(e, ctx, names.LockKey(victim)))
			took := requireLost(t, lease, lctx, at, 5*time.Second, victim)
			t.Logf("loss seen %v after the write", took)
			require.Positive(t, l.LossStats().Hints, "seen through an invalidation")
			// A second far below the renewal period (20 s): only the
			// server's notification can have ended the lease.
			require.Less(t, took, time.Second)
			err = lease.Release(ctx)
			var le *slotlock.LostError
			require.ErrorAs(t, err, &le)
		})
	}
}
