package slotlock_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/slotlock/slotlock"
)

// BenchmarkStrategyLockRelease locks and releases K random keys (of
// 1,000,000 order:<n>), one worker, uncontended, with scripts and with
// pipelines side by side: the price of running without Lua. docs/strategies.md
// has the numbers and the command line.
func BenchmarkStrategyLockRelease(b *testing.B) {
	for _, k := range []int{1, 10, 100, 1000} {
		for _, s := range []slotlock.Strategy{slotlock.StrategyLua, slotlock.StrategyPipeline} {
			b.Run(fmt.Sprintf("K=%d/%v", k, s), func(b *testing.B) {
				e := newEnv(b)
				l := e.locker(slotlock.Options{TTL: 30 * time.Second, Strategy: s})
				ctx := context.Background()
				r := rand.New(rand.NewPCG(1, uint64(k)))
				keys := make([]string, k)
				draw := func() {
					for i := range keys {
						keys[i] = "order:" + strconv.Itoa(r.IntN(1_000_000))
					}
				}
				lockRelease := func() {
					lease, err := l.Lock(ctx, keys...)
					if err != nil {
						b.Fatal(err)
					}
					if err := lease.Release(ctx); err != nil {
						b.Fatal(err)
					}
				}
				// Warm up: the slot map, the script cache, the pooled
				// connections the transactions use.
				draw()
				lockRelease()
				before := commandsProcessed(b, e)
				n := 0
				for b.Loop() {
					draw()
					lockRelease()
					n++
				}
				b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "batches/s")
				b.ReportMetric(float64(commandsProcessed(b, e)-before)/float64(n), "redis-cmds/op")
			})
		}
	}
}
