package slotlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/slotlock/slotlock"
)

// TestNoGoroutineLeaks runs everything that starts goroutines (the
// watchdog, waits on pub/sub, the in-process queue, trimming while waiting,
// a cancelled Lock) and checks that Close and Release leave none behind.
// Not parallel: goleak looks at every goroutine of the process.
func TestNoGoroutineLeaks(t *testing.T) {
	redistestRequire(t)
	ignore := goleak.IgnoreCurrent()
	func() {
		e := newEnv(t)
		ctx := ctxT(t, 30*time.Second)
		l, err := slotlock.New(e.client, slotlock.Options{Prefix: e.prefix, TTL: time.Second, Renew: slotlock.RenewAlways})
		require.NoError(t, err)
		other, err := slotlock.New(e.client, slotlock.Options{Prefix: e.prefix})
		require.NoError(t, err)

		held, err := l.Lock(ctx, "a", "b")
		require.NoError(t, err)
		// A cross-Locker waiter (pub/sub) and a local waiter, both cancelled.
		wctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		_, err = other.Lock(wctx, "b", "c")
		require.ErrorIs(t, err, context.DeadlineExceeded)
		_, err = l.Lock(wctx, "a")
		require.ErrorIs(t, err, context.DeadlineExceeded)
		cancel()
		// A waiter that is woken by the release.
		got := lockInBackground(ctx, other, "a")
		time.Sleep(50 * time.Millisecond) // let it start waiting; the test holds either way
		require.NoError(t, held.Release(ctx))
		require.NoError(t, <-got)
		require.NoError(t, l.Close())
		require.NoError(t, other.Close())
		e.client.Close()
	}()
	// rueidis closes the connections a topology refresh dropped from a
	// goroutine that first sleeps a few seconds: not ours, and it ends.
	goleak.VerifyNone(t, ignore, goleak.IgnoreAnyFunction("github.com/redis/rueidis.(*clusterClient)._refresh.func2"))
}
