// Command phases measures one worker locking and releasing K random keys
// on a 3+3 cluster of its own: the lock and release phases apart, client
// CPU, and the masters' command time per batch (INFO commandstats), for
// slotlock and for the raw pipeline (SET NX PX, then DEL, no owner check),
// in alternating runs so that a burst of load from other programs hits
// both. It is the probe for before/after comparisons of a change: run it
// at two revisions (it measures the library of the tree it is in).
//
//	cd bench && SLOTLOCK_CLUSTER=process go run ./cmd/phases -k 100 -n 2000 -rounds 16
//
// The slot micro-benchmarks and the full comparison with the other
// libraries are cmd/slotbench's (make bench).
package main

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/rueidis"

	"github.com/slotlock/slotlock"
	"github.com/slotlock/slotlock/internal/redistest"
)

func main() { os.Exit(run()) }

func run() int {
	k := flag.Int("k", 100, "keys per batch")
	n := flag.Int("n", 2000, "batches per run")
	rounds := flag.Int("rounds", 8, "runs of each side, alternating")
	modes := flag.String("modes", "slotlock,raw", "sides to run, comma separated: slotlock, raw")
	profile := flag.String("cpuprofile", "", "write a CPU profile of the slotlock runs to this file")
	timeout := flag.Duration("timeout", 10*time.Minute, "bound on the whole run")
	noTrack := flag.Bool("no-loss-tracking", false, "run slotlock with Options.NoLossTracking (what the loss tracker costs)")
	flag.Parse()

	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	cluster, err := redistest.Start(ctx, redistest.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, "phases:", err)
		return 1
	}
	defer cluster.Close()
	client, err := cluster.Client()
	if err != nil {
		fmt.Fprintln(os.Stderr, "phases:", err)
		return 1
	}
	defer client.Close()
	locker, err := slotlock.New(client, slotlock.Options{NoLossTracking: *noTrack})
	if err != nil {
		fmt.Fprintln(os.Stderr, "phases:", err)
		return 1
	}
	defer locker.Close()
	if *profile != "" {
		f, err := os.Create(*profile)
		if err != nil {
			fmt.Fprintln(os.Stderr, "phases:", err)
			return 1
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(os.Stderr, "phases:", err)
			return 1
		}
		defer pprof.StopCPUProfile()
	}

	sides := strings.Split(*modes, ",")
	results := map[string][]result{}
	r := rand.New(rand.NewPCG(1, 2))
	for round := range *rounds {
		for _, side := range sides {
			res, err := measure(ctx, client, locker, side, *k, *n, r)
			if err != nil {
				fmt.Fprintln(os.Stderr, "phases:", err)
				return 1
			}
			fmt.Printf("round %d %-8s %s\n", round+1, side, res)
			results[side] = append(results[side], res)
		}
	}
	for _, side := range sides {
		fmt.Printf("median   %-8s %s\n", side, median(results[side]))
	}
	return 0
}

// result is one run of n batches.
type result struct {
	batchesPerSec   float64
	lockP50, relP50 time.Duration
	clientCPU       time.Duration // per batch
	commands        map[string]float64
	commandsOrder   []string
}

func (r result) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%7.0f batches/s  lock p50 %-9v release p50 %-9v client CPU %v/batch  masters' command time per batch (µs):",
		r.batchesPerSec, r.lockP50.Round(time.Microsecond), r.relP50.Round(time.Microsecond), r.clientCPU.Round(time.Microsecond))
	for _, name := range r.commandsOrder {
		fmt.Fprintf(&b, " %s=%.1f", name, r.commands[name])
	}
	return b.String()
}

func measure(ctx context.Context, client rueidis.Client, locker *slotlock.Locker, side string, k, n int, r *rand.Rand) (result, error) {
	if side != "slotlock" && side != "raw" {
		return result{}, fmt.Errorf("unknown side %q", side)
	}
	masters, err := masterClients(client)
	if err != nil {
		return result{}, err
	}
	for _, m := range masters {
		if err := m.Do(ctx, m.B().ConfigResetstat().Build()).Error(); err != nil {
			return result{}, err
		}
	}
	keys := make([]string, k)
	lock := make([]time.Duration, 0, n)
	rel := make([]time.Duration, 0, n)
	cpu0 := processCPU()
	start := time.Now()
	for b := range n {
		drawKeys(keys, r)
		t0 := time.Now()
		var t1 time.Time
		if side == "slotlock" {
			lease, err := locker.Lock(ctx, keys...)
			if err != nil {
				return result{}, err
			}
			t1 = time.Now()
			if err := lease.Release(ctx); err != nil {
				return result{}, err
			}
		} else {
			token := "raw:" + strconv.Itoa(b)
			cmds := make(rueidis.Commands, len(keys))
			for i, key := range keys {
				cmds[i] = client.B().Set().Key(key).Value(token).Nx().Px(30 * time.Second).Build()
			}
			for _, res := range client.DoMulti(ctx, cmds...) {
				if err := res.Error(); err != nil {
					return result{}, fmt.Errorf("raw SET NX: %w", err)
				}
			}
			t1 = time.Now()
			for i, key := range keys {
				cmds[i] = client.B().Del().Key(key).Build()
			}
			for _, res := range client.DoMulti(ctx, cmds...) {
				if err := res.Error(); err != nil {
					return result{}, fmt.Errorf("raw DEL: %w", err)
				}
			}
		}
		lock = append(lock, t1.Sub(t0))
		rel = append(rel, time.Since(t1))
	}
	elapsed := time.Since(start)
	out := result{
		batchesPerSec: float64(n) / elapsed.Seconds(),
		lockP50:       p50(lock),
		relP50:        p50(rel),
		clientCPU:     (processCPU() - cpu0) / time.Duration(n),
		commands:      map[string]float64{},
	}
	for _, m := range masters {
		info, err := m.Do(ctx, m.B().Info().Section("commandstats").Build()).ToString()
		if err != nil {
			return result{}, err
		}
		for name, usec := range commandUsec(info) {
			switch name {
			case "config|resetstat", "info", "cluster|shards", "cluster|slots", "ping", "replconf", "role":
				continue // the harness's and the replicas' own traffic
			}
			out.commands[name] += float64(usec) / float64(n)
		}
	}
	for name := range out.commands {
		out.commandsOrder = append(out.commandsOrder, name)
	}
	slices.Sort(out.commandsOrder)
	return out, nil
}

// masterClients returns a client of every master: rueidis's Nodes lists
// replicas too, which answer ROLE with "slave".
func masterClients(client rueidis.Client) ([]rueidis.Client, error) {
	var out []rueidis.Client
	for addr, c := range client.Nodes() {
		role, err := c.Do(context.Background(), c.B().Role().Build()).ToArray()
		if err != nil {
			return nil, fmt.Errorf("ROLE %s: %w", addr, err)
		}
		if s, _ := role[0].ToString(); s == "master" {
			out = append(out, c)
		}
	}
	return out, nil
}

// commandUsec parses INFO commandstats: the usec of each command.
func commandUsec(info string) map[string]int64 {
	out := map[string]int64{}
	for _, line := range strings.Split(info, "\r\n") {
		name, rest, ok := strings.Cut(strings.TrimPrefix(line, "cmdstat_"), ":")
		if !ok || !strings.HasPrefix(line, "cmdstat_") {
			continue
		}
		for _, f := range strings.Split(rest, ",") {
			if v, ok := strings.CutPrefix(f, "usec="); ok {
				out[name], _ = strconv.ParseInt(v, 10, 64)
			}
		}
	}
	return out
}

// drawKeys fills keys with distinct keys of 1,000,000, as the benchmark
// suite draws them (the raw pipeline would find a repeated key held).
func drawKeys(keys []string, r *rand.Rand) {
	seen := make(map[int]bool, len(keys))
	for i := range keys {
		n := r.IntN(1_000_000)
		for seen[n] {
			n = r.IntN(1_000_000)
		}
		seen[n] = true
		keys[i] = "order:" + strconv.Itoa(n)
	}
}

func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func p50(d []time.Duration) time.Duration {
	slices.Sort(d)
	return d[len(d)/2]
}

// median picks, field by field, the median of the runs.
func median(rs []result) result {
	pick := func(get func(result) float64) float64 {
		v := make([]float64, len(rs))
		for i, r := range rs {
			v[i] = get(r)
		}
		slices.Sort(v)
		return v[len(v)/2]
	}
	out := result{
		batchesPerSec: pick(func(r result) float64 { return r.batchesPerSec }),
		lockP50:       time.Duration(pick(func(r result) float64 { return float64(r.lockP50) })),
		relP50:        time.Duration(pick(func(r result) float64 { return float64(r.relP50) })),
		clientCPU:     time.Duration(pick(func(r result) float64 { return float64(r.clientCPU) })),
		commands:      map[string]float64{},
	}
	for _, name := range rs[0].commandsOrder {
		out.commands[name] = pick(func(r result) float64 { return r.commands[name] })
		out.commandsOrder = append(out.commandsOrder, name)
	}
	return out
}
