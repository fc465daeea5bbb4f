package slotlock_test

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/slotlock/slotlock"
)

// commandsProcessed sums total_commands_processed over the masters: the
// Redis work a benchmark caused (benchmarks run alone, -run '^$').
func commandsProcessed(b *testing.B, e *env) int64 {
	ctx := context.Background()
	masters, err := e.c.Masters(ctx)
	if err != nil {
		b.Fatal(err)
	}
	var total int64
	for _, m := range masters {
		info, err := m.Info(ctx, "stats")
		if err != nil {
			b.Fatal(err)
		}
		for _, line := range strings.Split(info, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "total_commands_processed:"); ok {
				n, _ := strconv.ParseInt(v, 10, 64)
				total += n
			}
		}
	}
	return total
}

// benchOneKey locks and releases one key from `goroutines` goroutines of one
// Locker and reports the Redis commands each acquisition cost, as Redis
// counts them (total_commands_processed, which includes the commands a
// script runs: uncontended that is 4, a bare SET NX PX to lock and
// EVALSHA+GET+DEL to release). With the in-process queue the contended
// figure stays at the uncontended one, because waiters queue in memory;
// without it they meet in Redis and pay for conflicts, subscriptions and
// retries.
func benchOneKey(b *testing.B, goroutines int, opt slotlock.Options) {
	e := newEnv(b)
	opt.TTL = 10 * time.Second
	l := e.locker(opt)
	ctx := context.Background()
	before := commandsProcessed(b, e)
	b.ReportAllocs()
	var next atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	for range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(b.N) {
				lease, err := l.Lock(ctx, "hot")
				if err != nil {
					b.Error(err)
					return
				}
				if err := lease.Release(ctx); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	cmds := commandsProcessed(b, e) - before
	b.ReportMetric(float64(cmds)/float64(b.N), "redis-cmds/op")
}

func BenchmarkOneKey(b *testing.B) {
	b.Run("goroutines=1", func(b *testing.B) { benchOneKey(b, 1, slotlock.Options{}) })
	// The loss tracker's share of the single-key path (it sends nothing
	// for a lease released within its gathering window).
	// What an Observer that does nothing costs: the clock reads, the
	// count of nodes and the events (without one, none of it runs: the
	// goroutines=1 figures; docs/operability.md, "Zero cost when
	// unset").
	b.Run("goroutines=1/observer=nop", func(b *testing.B) { benchOneKey(b, 1, slotlock.Options{Observer: nopObserver{}}) })
	b.Run("goroutines=1/no-loss-tracking", func(b *testing.B) { benchOneKey(b, 1, slotlock.Options{NoLossTracking: true}) })
	b.Run("goroutines=64/local-queue", func(b *testing.B) { benchOneKey(b, 64, slotlock.Options{}) })
	b.Run("goroutines=64/no-local-queue", func(b *testing.B) {
		benchOneKey(b, 64, slotlock.Options{NoLocalQueue: true})
	})
}

// BenchmarkBareSetBuild builds the 100 SET NX PX commands of a bare
// attempt (batch.takeBare) two ways: rueidis's typed builder, which
// formats the TTL at every key, and Arbitrary with the TTL formatted once,
// which takeBare uses. The commands are not sent, so they do not go back
// to rueidis's pool.
func BenchmarkBareSetBuild(b *testing.B) {
	e := newEnv(b)
	keys := keysN("slotlock{tag}:order", 100)
	const holder = "AAAAAAAAAAAAAAAAAAAAAA"
	ttl := 30 * time.Second
	b.Run("typed", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			for _, k := range keys {
				_ = e.client.B().Set().Key(k).Value(holder).Nx().Px(ttl).Build()
			}
		}
	})
	b.Run("arbitrary", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			px := strconv.FormatInt(ttl.Milliseconds(), 10)
			for _, k := range keys {
				_ = e.client.B().Arbitrary("SET").Keys(k).Args(holder, "NX", "PX", px).Build()
			}
		}
	})
}

// nopObserver is an Observer that does nothing.
type nopObserver struct{}

func (nopObserver) Acquired(slotlock.AcquireEvent) {}
func (nopObserver) Released(slotlock.ReleaseEvent) {}
func (nopObserver) Renewed(slotlock.RenewEvent)    {}
func (nopObserver) Ended(slotlock.EndEvent)        {}
