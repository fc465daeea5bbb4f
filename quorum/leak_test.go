package quorum_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/slotlock/slotlock"
	"github.com/slotlock/slotlock/internal/redistest"
	"github.com/slotlock/slotlock/quorum"
)

// TestNoGoroutineLeaks: leases' monitors, the deployments' watchdogs and
// an attempt held up by a frozen deployment all end with Release and
// Close. Not parallel: goleak sees every goroutine of the process. The
// clients are made and closed inside the checked span: a rueidis client
// dials its connections lazily, on a wire it picks at random, so a client
// made before it would start goroutines of its own inside it.
func TestNoGoroutineLeaks(t *testing.T) {
	d := redistest.StartDeploymentsForTest(t, 3, redistest.Options{})
	ignore := goleak.IgnoreCurrent()
	func() {
		e := newEnvOn(t, d)
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
		for _, c := range e.clients {
			c.Close()
		}
	}()
	goleak.VerifyNone(t, ignore)
}
