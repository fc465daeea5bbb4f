// Command rounds compares contenders of the benchmark by alternating
// short cells of each in one process, many rounds, against a cluster you
// already have (the devcluster of `make cluster-up`, or staging): a burst
// of load from other programs then hits every side alike, and the median
// and interquartile range of each round's ratios say more than a few long
// cells would. It prints every cell, then per contender the medians of
// batches/s and of client CPU, Redis CPU and script time per batch, then
// every ratio of a contender to one listed before it.
//
//	make cluster-up
//	cd bench && go run ./cmd/rounds -addrs "$(cat ../.cache/devcluster.addrs)" \
//	    -k 100 -n 600 -rounds 30 -contenders raw-pipeline,checked-pipeline,slotlock
//
// Keys go under -prefix and are deleted afterwards (bench.Attach).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/slotlock/slotlock/bench"
)

func main() {
	testing.Init()
	addrs := flag.String("addrs", "", "the cluster (host:port,...)")
	prefix := flag.String("prefix", "rounds:", "prefix of every key written; refused if the cluster holds keys under it")
	k := flag.Int("k", 100, "keys per batch")
	list := flag.String("contenders", "raw-pipeline,checked-pipeline,slotlock", "contenders, comma separated; each is compared with those before it")
	n := flag.Int("n", 600, "batches per cell")
	rounds := flag.Int("rounds", 30, "rounds; each runs every contender once, the order rotating")
	rtt := flag.Duration("rtt", 0, "emulated round trip of every contender's connections (bench/latency), as slotbench's RTT cells")
	cpuprof := flag.String("cpuprofile", "", "write a CPU profile of the whole run")
	memprof := flag.String("memprofile", "", "write an allocation profile of the whole run")
	flag.Parse()
	if *addrs == "" {
		fmt.Fprintln(os.Stderr, "rounds: -addrs is required")
		os.Exit(2)
	}
	if err := run(*addrs, *prefix, *k, *rtt, strings.Split(*list, ","), *n, *rounds, *cpuprof, *memprof); err != nil {
		fmt.Fprintln(os.Stderr, "rounds:", err)
		os.Exit(1)
	}
}

func run(addrs, prefix string, k int, rtt time.Duration, names []string, n, rounds int, cpuprof, memprof string) error {
	if err := flag.Set("test.benchtime", strconv.Itoa(n)+"x"); err != nil {
		return err
	}
	ctx := context.Background()
	env, err := bench.Attach(ctx, strings.Split(addrs, ","), prefix)
	if err != nil {
		return err
	}
	defer env.Close()
	defer func() { _, _ = env.Cleanup(ctx) }()
	runs := make([]*bench.Run, len(names))
	for i, name := range names {
		r, err := env.NewRun(ctx, bench.Cell{Contender: name, K: k, W: 1, RTT: rtt})
		if err != nil {
			return err
		}
		defer r.Close()
		runs[i] = r
	}
	if cpuprof != "" {
		f, err := os.Create(cpuprof)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	if memprof != "" {
		runtime.MemProfileRate = 2048
		defer func() {
			if f, err := os.Create(memprof); err == nil {
				_ = pprof.Lookup("allocs").WriteTo(f, 0)
				f.Close()
			}
		}()
	}
	type series struct{ bps, client, server, script []float64 }
	got := make([]series, len(names))
	ratios := map[[2]int][]float64{}
	for round := range rounds {
		bps := make([]float64, len(names))
		for j := range names {
			i := (j + round) % len(names)
			r := runs[i]
			res := testing.Benchmark(func(b *testing.B) { r.Bench(ctx, b) })
			last := r.Last
			if last.Err != nil {
				return fmt.Errorf("%s: %w", last.Name(), last.Err)
			}
			per := func(us float64) float64 { return us / float64(last.Batches) }
			s := &got[i]
			bps[i] = last.BatchesPerSec()
			s.bps = append(s.bps, bps[i])
			s.client = append(s.client, per(float64(last.ClientCPU.Microseconds())))
			s.server = append(s.server, per(float64(last.Server.CPU.Microseconds())))
			s.script = append(s.script, per(float64(last.Server.ScriptUsec)))
			fmt.Printf("round %d %-18s %8.0f batches/s  client %6.1f µs  Redis %6.1f µs  script %6.1f µs per batch  %d allocs %d B\n",
				round, names[i], bps[i], s.client[len(s.client)-1], s.server[len(s.server)-1], s.script[len(s.script)-1], res.AllocsPerOp(), res.AllocedBytesPerOp())
		}
		for a := range names {
			for b := range a {
				if bps[b] > 0 {
					ratios[[2]int{a, b}] = append(ratios[[2]int{a, b}], bps[a]/bps[b])
				}
			}
		}
	}
	fmt.Printf("\nK = %d, %d batches per cell, %d rounds: median [interquartile range] (min-max)\n", k, n, rounds)
	for i, name := range names {
		s := got[i]
		fmt.Printf("%s\n  batches/s %s\n  client CPU µs/batch %s\n  Redis CPU µs/batch %s\n  script µs/batch %s\n", name, summary(s.bps), summary(s.client), summary(s.server), summary(s.script))
	}
	for a := range names {
		for b := range a {
			fmt.Printf("%s / %s: %s\n", names[a], names[b], summary(ratios[[2]int{a, b}]))
		}
	}
	return nil
}

// summary is the median, the interquartile range (nearest rank) and the
// extremes.
func summary(x []float64) string {
	if len(x) == 0 {
		return "n/a"
	}
	s := slices.Sorted(slices.Values(x))
	n := len(s)
	med := s[n/2]
	if n%2 == 0 {
		med = (s[n/2-1] + s[n/2]) / 2
	}
	return fmt.Sprintf("%.3f [%.3f-%.3f] (%.3f-%.3f)", med, s[n/4], s[(3*n)/4], s[0], s[n-1])
}
