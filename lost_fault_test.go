package slotlock_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/slotlock/slotlock"
	"github.com/slotlock/slotlock/internal/redistest"
	"github.com/slotlock/slotlock/slot"
)

// TestLossOnNodeFaults, on a cluster of its own (it pauses and kills
// masters): a lease whose renewals a paused master blocks ends at its
// deadline; a lease whose key a failover lost (the replica never got the
// grant) ends once the replica is promoted, long before the watchdog's
// next renewal (TTL 60 s: every 20 s).
func TestLossOnNodeFaults(t *testing.T) {
	c := redistest.StartForTest(t, redistest.Options{ExtraArgs: []string{"--cluster-node-timeout", "1000"}})
	e := newEnvOn(t, c)
	ctx := ctxT(t, 2*time.Minute)
	names, _ := slot.NewNamer(e.prefix)
	nodeOf := func(key string) *redistest.Node {
		n, err := c.NodeForSlot(ctx, slot.KeySlot(names.LockKey(key)))
		require.NoError(t, err)
		return n
	}

	t.Run("paused master: expiry at the deadline", func(t *testing.T) {
		// TTL 3 s: the watchdog would see the expiry after a renewal
		// that times out (1 s) and its retry, typically hundreds of ms
		// late; the deadline alone is on time.
		l := e.locker(slotlock.Options{TTL: 3 * time.Second, Renew: slotlock.RenewAlways})
		lease, err := l.Lock(ctx, "paused:1")
		require.NoError(t, err)
		lctx, cancel := lease.Context(ctx)
		defer cancel()
		// The master's replicas are paused too: no failover can move the
		// key to a node where renewals succeed (Valkey 8.0.1 promoted a
		// replica within the TTL with a 1 s node timeout, and the lease
		// then rightly lived on).
		m := nodeOf("paused:1")
		replicas, err := c.ReplicasOf(ctx, m)
		require.NoError(t, err)
		for _, n := range append(replicas, m) {
			require.NoError(t, n.Pause())
			defer func() { require.NoError(t, n.Resume()) }()
		}
		late := requireLost(t, lease, lctx, lease.Deadline(), 10*time.Second, "paused:1")
		t.Logf("ended %v after the deadline", late)
		require.Less(t, late, 100*time.Millisecond)
	})
	require.NoError(t, c.WaitReady(ctx))

	t.Run("failover that loses the key", func(t *testing.T) {
		l := e.locker(slotlock.Options{TTL: time.Minute, Renew: slotlock.RenewAlways})
		key := "failover:1"
		m := nodeOf(key)
		replicas, err := c.ReplicasOf(ctx, m)
		require.NoError(t, err)
		require.NotEmpty(t, replicas)
		r := replicas[0]
		// The replica misses the grant: paused, and its link dropped by
		// the master (a paused process still receives into its socket
		// buffer what the master sends), while the master takes the key.
		require.NoError(t, r.Pause())
		require.NoError(t, m.Do(ctx, "CLIENT", "KILL", "TYPE", "replica").Error())
		lease, err := l.Lock(ctx, key)
		require.NoError(t, err)
		lctx, cancel := lease.Context(ctx)
		defer cancel()
		requireRegistered(t, l, 1)
		require.NoError(t, m.Kill())
		require.NoError(t, r.Resume())
		killed := time.Now()
		took := requireLost(t, lease, lctx, killed, 30*time.Second, key)
		role, err := r.Role(ctx)
		require.NoError(t, err)
		t.Logf("lost key seen %v after the master was killed (replica now %s; node timeout 1 s)", took, role)
		require.Equal(t, "master", role)
		require.Less(t, took, 25*time.Second) // 2.3-2.6 s measured under load
		require.NoError(t, m.Restart(ctx))
	})
}
