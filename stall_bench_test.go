package slotlock_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/slotlock/slotlock"
	"github.com/slotlock/slotlock/internal/redistest"
)

// BenchmarkOthersStall measures the cost of a big batch to everyone else: a
// node runs a script alone, so while one call runs every other client of
// that node waits. It locks and releases K keys and reports, from the
// masters' SLOWLOG (the server's own timing of each command, free of any
// client's scheduling), the median, p99 and longest script call, beside
// the batches' rate. On a loaded machine the longest includes the server
// being descheduled (plain SETs of a few microseconds then show there too),
// so the p99 is the figure to read. docs/design.md ("A bound on one call's
// server time") says what it bounds.
func BenchmarkOthersStall(b *testing.B) {
	for _, k := range []int{1_000, 10_000, 100_000} {
		b.Run(fmt.Sprintf("K=%d", k), func(b *testing.B) {
			e := newEnv(b)
			l := e.locker(slotlock.Options{TTL: 30 * time.Second})
			keys := keysN(fmt.Sprintf("stall%d", k), k)
			ctx := context.Background()
			masters, err := e.c.Masters(ctx)
			if err != nil {
				b.Fatal(err)
			}
			for _, m := range masters {
				slowLogFor(b, ctx, m)
			}
			b.ResetTimer()
			for range b.N {
				lease, err := l.Lock(ctx, keys...)
				if err != nil {
					b.Fatal(err)
				}
				if err := lease.Release(ctx); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			calls := scriptCallTimes(b, ctx, masters)
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "batches/s")
			if len(calls) > 0 {
				b.ReportMetric(float64(calls[len(calls)/2])/1000, "call-p50-ms")
				b.ReportMetric(float64(calls[len(calls)*99/100])/1000, "call-p99-ms")
				b.ReportMetric(float64(calls[len(calls)-1])/1000, "call-max-ms")
			}
		})
	}
}

// slowLogFor makes m log every command until the benchmark ends, then puts
// back the settings it found (the cluster is shared by the package's
// tests and benchmarks).
func slowLogFor(b *testing.B, ctx context.Context, m *redistest.Node) {
	restore := [][]string{{"SLOWLOG", "RESET"}}
	for _, name := range []string{"slowlog-log-slower-than", "slowlog-max-len"} {
		kv, err := m.Do(ctx, "CONFIG", "GET", name).AsStrMap() // RESP3: a map
		if err != nil || kv[name] == "" {
			b.Fatalf("CONFIG GET %s on %s: %v %v", name, m, kv, err)
		}
		restore = append(restore, []string{"CONFIG", "SET", name, kv[name]})
	}
	b.Cleanup(func() {
		for _, cmd := range restore {
			_ = m.Do(context.Background(), cmd...).Error()
		}
	})
	for _, cmd := range [][]string{
		{"CONFIG", "SET", "slowlog-log-slower-than", "0"}, // every command
		{"CONFIG", "SET", "slowlog-max-len", "100000"},
		{"SLOWLOG", "RESET"},
	} {
		if err := m.Do(ctx, cmd...).Error(); err != nil {
			b.Fatal(err)
		}
	}
}

// scriptCallTimes reads the masters' SLOWLOG and returns the durations (µs,
// ascending) of every script call (EVAL, EVALSHA).
func scriptCallTimes(b *testing.B, ctx context.Context, masters []*redistest.Node) []int64 {
	var out []int64
	for _, m := range masters {
		entries, err := m.Do(ctx, "SLOWLOG", "GET", "100000").ToArray()
		if err != nil {
			b.Fatal(err)
		}
		for _, en := range entries {
			f, err := en.ToArray()
			if err != nil || len(f) < 4 {
				b.Fatalf("slowlog entry %v: %v", en, err)
			}
			us, err := f[2].AsInt64()
			if err != nil {
				b.Fatal(err)
			}
			args, _ := f[3].ToArray()
			if len(args) == 0 {
				continue
			}
			if name, _ := args[0].ToString(); strings.HasPrefix(strings.ToUpper(name), "EVAL") {
				out = append(out, us)
			}
		}
	}
	slices.Sort(out)
	return out
}
