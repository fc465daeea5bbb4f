package slotlock_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/slotlock/slotlock"
)

// strategyCommands sums total_commands_processed over the masters: the
// Redis work a benchmark caused (run benchmarks alone, -run '^$'). It
// counts the commands a script runs too.
func strategyCommands(b *testing.B, e *env) int64 {
	b.Helper()
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
				before := strategyCommands(b, e)
				n := 0
				for b.Loop() {
					draw()
					lockRelease()
					n++
				}
				b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "batches/s")
				b.ReportMetric(float64(strategyCommands(b, e)-before)/float64(n), "redis-cmds/op")
			})
		}
	}
}
