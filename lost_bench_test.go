package slotlock_test

import (
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/slotlock/slotlock"
	"github.com/slotlock/slotlock/internal/redistest"
	"github.com/slotlock/slotlock/slot"
)

// reportLatency reports p50, p99 and max of ds in milliseconds.
func reportLatency(b *testing.B, ds []time.Duration) {
	b.Helper()
	if len(ds) == 0 {
		return
	}
	slices.Sort(ds)
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	// Nearest rank: the smallest value with at least q of the trials at or
	// below it.
	at := func(q float64) time.Duration {
		return ds[max(0, int(math.Ceil(q*float64(len(ds))))-1)]
	}
	b.ReportMetric(ms(at(0.50)), "p50-ms")
	b.ReportMetric(ms(at(0.99)), "p99-ms")
	b.ReportMetric(ms(ds[len(ds)-1]), "max-ms")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkLossDetection measures how long a lease takes to end after the
// event that loses it, one trial per iteration:
//
//   - del: an operator DELs one random key of a 1,000-key lease (TTL 30 s,
//     renewed); from the DEL's reply to Done.
//   - expiry-paused-node: the master of a one-key lease (TTL 300 ms,
//     renewed) is paused, so renewals block; from the lease's deadline
//     to Done.
//   - failover: the master of a one-key lease is killed after taking a
//     key its paused replica never received; from the kill to Done
//     (cluster-node-timeout 1 s).
//
// Run: SLOTLOCK_CLUSTER=process go test -run '^$' -bench BenchmarkLossDetection
// -benchtime 200x . (failover: -benchtime 5x).
func BenchmarkLossDetection(b *testing.B) {
	b.Run("del", func(b *testing.B) {
		e := newEnv(b)
		l := e.locker(slotlock.Options{})
		ctx := ctxT(b, time.Hour)
		names, _ := slot.NewNamer(e.prefix)
		keys := keysN("bench", 1000)
		var ds []time.Duration
		for range b.N {
			lease, err := l.Lock(ctx, keys...)
			require.NoError(b, err)
			st := l.LossStats()
			want := st.Held + 1000
			require.Eventually(b, func() bool { return l.LossStats().Held >= want }, 10*time.Second, 100*time.Microsecond)
			victim := lease.Keys()[rand.N(1000)]
			require.NoError(b, e.client.Do(ctx, e.client.B().Del().Key(names.LockKey(victim)).Build()).Error())
			at := time.Now()
			<-lease.Done()
			ds = append(ds, time.Since(at))
			_ = lease.Release(ctx)
		}
		reportLatency(b, ds)
	})

	faults := func(b *testing.B) (*redistest.Cluster, *env) {
		c := redistest.StartForTest(b, redistest.Options{ExtraArgs: []string{"--cluster-node-timeout", "1000"}})
		return c, newEnvOn(b, c)
	}

	b.Run("expiry-paused-node", func(b *testing.B) {
		c, e := faults(b)
		l := e.locker(slotlock.Options{TTL: 300 * time.Millisecond, Renew: slotlock.RenewAlways})
		ctx := ctxT(b, time.Hour)
		names, _ := slot.NewNamer(e.prefix)
		var ds []time.Duration
		for i := range b.N {
			key := "exp:" + strconv.Itoa(i)
			m, err := c.NodeForSlot(ctx, slot.KeySlot(names.LockKey(key)))
			require.NoError(b, err)
			lease, err := l.Lock(ctx, key)
			require.NoError(b, err)
			require.NoError(b, m.Pause())
			<-lease.Done()
			ds = append(ds, time.Since(lease.Deadline()))
			require.NoError(b, m.Resume())
			require.NoError(b, c.WaitReady(ctx))
		}
		reportLatency(b, ds)
	})

	b.Run("failover", func(b *testing.B) {
		c, e := faults(b)
		l := e.locker(slotlock.Options{TTL: time.Minute})
		ctx := ctxT(b, time.Hour)
		names, _ := slot.NewNamer(e.prefix)
		var ds []time.Duration
		for i := range b.N {
			key := "fo:" + strconv.Itoa(i)
			m, err := c.NodeForSlot(ctx, slot.KeySlot(names.LockKey(key)))
			require.NoError(b, err)
			replicas, err := c.ReplicasOf(ctx, m)
			require.NoError(b, err)
			r := replicas[0]
			require.NoError(b, r.Pause())
			require.NoError(b, m.Do(ctx, "CLIENT", "KILL", "TYPE", "replica").Error())
			lease, err := l.Lock(ctx, key)
			require.NoError(b, err)
			require.Eventually(b, func() bool { return l.LossStats().Held >= int64(i+1) }, 10*time.Second, time.Millisecond)
			require.NoError(b, m.Kill())
			at := time.Now()
			require.NoError(b, r.Resume())
			select {
			case <-lease.Done():
			case <-time.After(30 * time.Second):
				b.Fatal("loss not seen in 30 s")
			}
			ds = append(ds, time.Since(at))
			require.NoError(b, m.Restart(ctx))
			require.NoError(b, c.WaitReady(ctx))
			_ = lease.Release(ctx)
		}
		reportLatency(b, ds)
	})
}
