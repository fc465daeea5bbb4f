package quorum_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/slotlock/slotlock"
	"github.com/slotlock/slotlock/quorum"
)

// TestNoGoroutineLeaks: leases' monitors, the deployments' watchdogs and
// an attempt held up by a frozen deployment all end with Release and
// Close. Not parallel: goleak sees every goroutine of the process.
func TestNoGoroutineLeaks(t *testing.T) {
	e := privateEnv(t, 3)
	ignore := goleak.IgnoreCurrent()
	func() {
		ctx := ctxT(t, 30*time.Second)
		l, err := quorum.New(e.clients, quorum.Options{
			Options:        slotlock.Options{Prefix: e.prefix, TTL: time.Second, CleanupTimeout: time.Second},
			AttemptTimeout: 100 * time.Millisecond,
		})
		require.NoError(t, err)
		le, err := l.Lock(ctx, "a", "b")
		require.NoError(t, err)
		_, stop := le.Context(ctx)
		_, err = l.TryLock(ctx, "b")
		require.ErrorIs(t, err, quorum.ErrNoQuorum)
		stop()
		require.NoError(t, le.Release(ctx))
		require.NoError(t, e.d.Node(2).Pause())
		le, err = l.Lock(ctx, "c") // granted by two; the third is late
		require.NoError(t, err)
		require.NoError(t, le.Release(ctx))
		require.NoError(t, e.d.Node(2).Resume())
		require.NoError(t, l.Close())
	}()
	goleak.VerifyNone(t, ignore)
}
