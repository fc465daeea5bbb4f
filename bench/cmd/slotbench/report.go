package main

import (
	"bytes"
	"cmp"
	"encoding/csv"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/slotlock/slotlock/batch"
	"github.com/slotlock/slotlock/bench"
)

// peers are the libraries and patterns a user would otherwise pick: the
// contended target compares slotlock with the best of them. The raw
// pipeline is not one: it is not a lock.
var peers = []string{"sequential-setnx", "redsync", "rueidislock", "redislock"}

// noisy is the share of a core that other programs may use during a cell
// before the report marks it.
const noisy = 0.2

func writeReport(cfg config, m *machine, rows []row, pairs []*pairTarget, profs map[int]*profileReport, micro *microResult) error {
	dir := filepath.Join(cfg.out, "benchmarks")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "results.csv"), resultsCSV(rows), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "pairs.csv"), pairsCSV(pairs), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "bench.txt"), benchstatText(m, rows), 0o644); err != nil {
		return err
	}
	if err := writeChart(filepath.Join(dir, "keys-per-second.svg"), rows); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(cfg.out, "benchmarks.md"), markdown(m, rows, pairs, profs, micro), 0o644)
}

func resultsCSV(rows []row) []byte {
	var b bytes.Buffer
	w := csv.NewWriter(&b)
	_ = w.Write(rowHeader)
	for _, r := range rows {
		_ = w.Write(rowFields(r))
	}
	w.Flush()
	return b.Bytes()
}

// pairsCSV lists every round of every paired target, each side's cell as
// results.csv has it, in the order run: what a median in the Targets
// table was taken from, and the load during each round.
func pairsCSV(pairs []*pairTarget) []byte {
	var b bytes.Buffer
	w := csv.NewWriter(&b)
	_ = w.Write(append([]string{"pair", "round", "side"}, rowHeader...))
	for _, t := range pairs {
		for i, r := range t.Rows {
			side := "A"
			if r.Cell != t.A {
				side = "B"
			}
			// Rows come two a round (a failed one ends the pair).
			_ = w.Write(append([]string{t.Label, strconv.Itoa(i/2 + 1), side}, rowFields(r)...))
		}
	}
	w.Flush()
	return b.Bytes()
}

// rowHeader names rowFields' columns. The round trip and the process split
// follow K and W (a cell is named by all six, and the kind of lease, the
// last but one column, where there is one); older files lack them.
// machine_busy_cores is the whole machine's busy cores during the timed
// window (bench.Result.MachineBusy).
var rowHeader = []string{
	"contender", "mode", "K", "W", "rtt_us", "procs", "gomaxprocs", "batches", "seconds", "batches_per_s", "keys_per_s",
	"p50_us", "p99_us", "max_us", "wait_p50_us", "wait_p99_us", "wait_max_us",
	"client_cpu_us_per_batch", "server_cpu_us_per_batch", "server_cmds_per_batch",
	"server_cmd_us_per_batch", "script_calls_per_batch", "script_us_per_call",
	"allocs_per_batch", "bytes_per_batch", "other_programs_cores", "machine_busy_cores", "stalls", "error",
	"kind", "ran_out",
}

// rowFields is one cell's line of results.csv.
func rowFields(r row) []string {
	errText := ""
	if r.Err != nil {
		errText = r.Err.Error()
	}
	return []string{
		r.Contender, r.Mode(), strconv.Itoa(r.K), strconv.Itoa(r.W),
		strconv.FormatInt(r.RTT.Microseconds(), 10), strconv.Itoa(r.Procs), strconv.Itoa(r.MaxProcs), strconv.Itoa(r.Batches),
		f3(r.Elapsed.Seconds()), f1(r.BatchesPerSec()), f1(r.KeysPerSec()),
		us(r.Latency.P50), us(r.Latency.P99), us(r.Latency.Max),
		us(r.Wait.P50), us(r.Wait.P99), us(r.Wait.Max),
		us(r.PerBatch(r.ClientCPU)), us(r.PerBatch(r.Server.CPU)), perBatch(r, r.Server.Calls),
		perBatch(r, r.Server.Usec), perBatch(r, r.Server.ScriptCalls), perCall(r.Server.ScriptUsec, r.Server.ScriptCalls),
		strconv.FormatInt(r.AllocsPerBatch, 10), strconv.FormatInt(r.BytesPerBatch, 10), f3(r.Foreign), f3(r.MachineBusy),
		strconv.FormatInt(r.Stalls, 10), errText,
		r.Kind, strconv.Itoa(r.RanOut),
	}
}

// benchstatText writes the cells in the format of `go test -bench`, so that
// two runs compare with `benchstat old.txt new.txt`.
func benchstatText(m *machine, rows []row) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "goos: %s\ngoarch: %s\npkg: github.com/slotlock/slotlock/bench\ncpu: %s\n", runtime.GOOS, runtime.GOARCH, m.CPUModel)
	fmt.Fprintf(&b, "backend: %s\nserver: %s\nslotlock: %s\n", m.Backend, m.RedisVersion, m.Library)
	for _, r := range rows {
		if r.Err != nil || r.Batches == 0 {
			continue
		}
		fmt.Fprintf(&b, "BenchmarkLock/%s-%d\t%d\t%.0f ns/op\t%.2f batches/s\t%.1f keys/s\t%d p50-us\t%d p99-us",
			r.Name(), runtime.GOMAXPROCS(0), r.Batches, float64(r.Elapsed.Nanoseconds())/float64(r.Batches),
			r.BatchesPerSec(), r.KeysPerSec(), r.Latency.P50.Microseconds(), r.Latency.P99.Microseconds())
		if r.Hot > 0 {
			fmt.Fprintf(&b, "\t%.3f wait-p99-ms\t%.3f wait-max-ms", float64(r.Wait.P99.Microseconds())/1000, float64(r.Wait.Max.Microseconds())/1000)
		}
		fmt.Fprintf(&b, "\t%d B/op\t%d allocs/op\n", r.BytesPerBatch, r.AllocsPerBatch)
	}
	return b.Bytes()
}

// report holds the rows with lookups by cell.
type report struct {
	rows []row
}

func (rp report) get(name string, k, w, hot int, rtt time.Duration) (row, bool) {
	return find(rp.rows, bench.Cell{Contender: name, K: k, W: w, Hot: hot, RTT: rtt})
}

// ratio is a/b of two contenders' batches/s in the cell of k, w, hot and
// rtt; ok is false when either is missing.
func (rp report) ratio(a, b string, k, w, hot int, rtt time.Duration) (float64, bool) {
	cell := bench.Cell{K: k, W: w, Hot: hot, RTT: rtt}
	ca, cb := cell, cell
	ca.Contender, cb.Contender = a, b
	return rp.cellRatio(ca, cb)
}

// cellRatio is a/b of two cells' batches/s; ok is false when either is
// missing or failed.
func (rp report) cellRatio(a, b bench.Cell) (float64, bool) {
	ra, ok1 := find(rp.rows, a)
	rb, ok2 := find(rp.rows, b)
	if !ok1 || !ok2 || rb.BatchesPerSec() == 0 {
		return 0, false
	}
	return ra.BatchesPerSec() / rb.BatchesPerSec(), true
}

// noise is the largest relative gap, over K, between slotlock and
// slotlock-multi at W = 1, where they are the same configuration.
func (rp report) noise() (float64, bool) {
	gap, ok := 0.0, false
	for _, k := range bench.Ks {
		if r, found := rp.ratio("slotlock-multi", "slotlock", k, 1, 0, 0); found {
			gap, ok = max(gap, r-1, 1/r-1), true
		}
	}
	return gap, ok
}

// bestPeer is the peer with the most batches/s in the contended cell at a
// round trip.
func (rp report) bestPeer(rtt time.Duration) (row, bool) {
	var best row
	found := false
	for _, p := range peers {
		if r, ok := rp.get(p, bench.ContendedK, bench.ContendedW, bench.HotKeys, rtt); ok && (!found || r.BatchesPerSec() > best.BatchesPerSec()) {
			best, found = r, true
		}
	}
	return best, found
}

func markdown(m *machine, rows []row, pairs []*pairTarget, profs map[int]*profileReport, micro *microResult) []byte {
	rp := report{rows: rows}
	rds := readRules(targetRules(rows), rp, pairs)
	var b strings.Builder
	p := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }

	p("# Benchmarks\n\n")
	p("<!-- Generated by bench/cmd/slotbench (`%s`). Edit the generator, not this file. -->\n\n", m.Command)
	p("slotlock locks K keys at once; without it, a user of Redis Cluster would take them one by one with SET NX, with a lock library per key, or per slot. ")
	p("This page measures all of them side by side, in one run, against one real Redis Cluster (3 masters, 3 replicas on 127.0.0.1), ")
	p("with two ceilings: a pipeline that checks nothing, and the same pipeline with only an owner-checked release, the most any lock that deletes only its own keys can make. ")
	p("%s\n\n", standing(rds, pairs))
	if m.Short {
		p("> **Short mode** (CI smoke): cells of %s, too short for the numbers to mean much. Run `make bench` for the real report.\n\n", m.Benchtime)
	}

	p("## Setup\n\n")
	p("| | |\n|---|---|\n")
	p("| machine | %d CPUs (`nproc`), %s, Linux %s |\n", m.CPUs, m.CPUModel, m.Kernel)
	p("| Server | %s, %s, backend: %s |\n", m.RedisVersion, m.Shape, backendText(m.Backend))
	p("| Go | %s, GOMAXPROCS %d |\n", m.GoVersion, runtime.GOMAXPROCS(0))
	p("| slotlock | commit %s |\n", m.Library)
	p("| command | `%s` (took %s; load average %s at start, %s at end) |\n", m.Command, m.Took.Round(time.Second), m.LoadStart, m.LoadEnd)
	p("| cell length | %s per uncontended cell, %s per contended cell (testing.B's target time); the first cell is run once, unrecorded, before the matrix (a warm-up) |\n\n", m.Benchtime, m.HotTime)
	p("Client and cluster share the machine's %d cores: every figure below includes that competition, for every contender alike.\n\n", m.CPUs)

	p("Each cell is a `testing.B` benchmark: W workers share b.N batches, and a batch is *lock K keys, then release them*. ")
	p("Keys are drawn without repetition from 1,000,000 keys `order:<n>`, whose names the benchmark keeps in one pointer-free table: as a million strings they made every garbage collection of this process cost about 10 ms more, which fell on whichever cell was running and more often on the contender that allocates more bytes per batch. Uncontended cells give each worker its own share of the keyspace (n mod W = w), so no two workers ever want the same key. ")
	p("The contended cell has %d workers taking %d keys each from %d hot keys. ", bench.ContendedW, bench.ContendedK, bench.HotKeys)
	p("The wide cell (slotlock only, paired beside the targets at %s, no verdict) has %d workers taking %d keys each from %d hot keys: a release hands several keys at once to each of several waiters. ", rttText(bench.FarRTT), bench.WideW, bench.WideK, bench.WideHot)
	p("*Latency* is lock plus release of one batch; *wait* is the time from asking for the keys to holding them all. ")
	p("Every contender uses a %s TTL (rueidislock: its own 5 s validity, extended in the background) and a client of its own.\n\n", bench.TTL)
	p("**Every contender proves it held its keys.** Before timing, two batches per worker read every lock key back from Redis with one pipelined GET and compare it with the acquirer's token (rueidislock, whose tokens are private: the key must exist and the lock's context must be alive). ")
	p("During timing, an in-process table records which worker holds each key, and a second claim on a held key is a violation; every release goes through the library's owner check (slotlock's `Release`, redsync's `Unlock`, redislock's `Release`, the owner-checked script, rueidislock's lock context). ")
	p("Any violation fails the cell. None did in this run unless a cell below says FAILED.\n\n")
	p("| contender | what one batch does |\n|---|---|\n")
	for _, f := range bench.Contenders {
		p("| %s | %s |\n", f.Name, f.About)
	}
	for _, f := range bench.Probes {
		p("| %s | %s (a reference for the targets' pairs, not in the matrix) |\n", f.Name, f.About)
	}
	p("\n")

	writeWire(&b, m)
	writeTargets(&b, rp, pairs, rds)
	writeThroughput(&b, rp)
	writeRoundTrips(&b, rp, m)
	writeOthers(&b, rp)
	writeContended(&b, rp)
	writeProcs(&b, rp)
	writeKinds(&b, rp, pairs)
	writeTimeBudget(&b, rp, profs)
	b.WriteString(k100Notes + "\n")
	writeMicro(&b, micro)

	p("## Files\n\n")
	p("- [`benchmarks/results.csv`](benchmarks/results.csv): every cell, every metric (client and server CPU per batch, commands per batch, allocations).\n")
	p("- [`benchmarks/pairs.csv`](benchmarks/pairs.csv): every round of every paired target and reference, each side's cell with the same metrics, in the order run (an uncontended round, run batch by batch, has no CPU or server figures: the two sides' work is mixed).\n")
	p("- [`benchmarks/bench.txt`](benchmarks/bench.txt): the cells in `go test -bench` format: `benchstat old.txt new.txt` compares two runs.\n")
	p("- [`benchmarks/keys-per-second.svg`](benchmarks/keys-per-second.svg): the chart above.\n")
	for _, k := range profiledKs {
		if prof := profs[k]; prof != nil {
			name := filepath.Base(prof.Path)
			p("- [`benchmarks/%s`](benchmarks/%s): the CPU profile of slotlock at K = %s (`go tool pprof -top docs/benchmarks/%s`).\n", name, name, commas(int64(k)), name)
		}
	}
	p("\nOne cell from the module: `cd bench && go test -run '^$' -bench 'Lock/mode=uncontended/lib=slotlock/K=1000/W=1' -benchtime 5s`.\n")
	return []byte(b.String())
}

func backendText(b string) string {
	switch b {
	case "docker":
		return "docker (one container per node, host networking, via testcontainers; the six nodes share one cgroup's CPU weight, so cells with many client threads starve them: `make bench` uses processes unless SLOTLOCK_CLUSTER says docker)"
	case "process":
		return "process (redis-server processes on the host)"
	case "attached":
		return "a cluster that was already running (`-addrs`), keys under a prefix of the run's own"
	}
	return b
}

// metText is the verdict of a bound that needs no ceiling (the slot
// package's micro-benchmark).
func metText(ok bool) string {
	if ok {
		return "(met)"
	}
	return "(**not met**)"
}

// writeStalls lists the cells in which a contender stalled on a free key
// and the benchmark retried the batch.
func writeStalls(b *strings.Builder, rp report) {
	for _, r := range rp.rows {
		if r.Err == nil && r.Stalls > 0 {
			fmt.Fprintf(b, "- **%s stalled** in %s: %d acquisition(s) made no progress on a free key for %s; the benchmark gave the batch back and retried it (the time counts in the latency). ",
				r.Contender, r.Name(), r.Stalls, bench.StallAfter)
			b.WriteString("rueidislock's WithContext, after an attempt that fails by its own 20 ms TryNextAfter timeout (CPU starvation), waits for an invalidation of the key that nothing will send.\n")
		}
	}
	b.WriteString("\n")
}

// commandMix lists the most frequent commands of a cell, per batch.
func commandMix(r row, limit int) string {
	type kv struct {
		name  string
		calls int64
	}
	var all []kv
	for name, calls := range r.Server.ByCommand {
		all = append(all, kv{name, calls})
	}
	slices.SortFunc(all, func(a, b kv) int {
		if a.calls != b.calls {
			return cmp.Compare(b.calls, a.calls)
		}
		return strings.Compare(a.name, b.name)
	})
	var parts []string
	for i, c := range all {
		if i == limit {
			break
		}
		parts = append(parts, fmt.Sprintf("%s %.1f", strings.ToUpper(c.name), float64(c.calls)/float64(r.Batches)))
	}
	return strings.Join(parts, ", ")
}

func writeTimeBudget(b *strings.Builder, rp report, profs map[int]*profileReport) {
	p := func(format string, a ...any) { fmt.Fprintf(b, format, a...) }
	p("## Where the time goes on loopback\n\n")
	p("Per batch, one worker (W = 1), no emulated round trip. *Client CPU* is this process's CPU time (getrusage); *Redis CPU* is the nodes' own (INFO cpu of all 6 nodes: execution, network I/O, replication to the replicas). ")
	p("*Script calls* and *µs per script call* come from INFO commandstats of the 3 masters, reset before each cell (EVALSHA and EVAL; a call's time includes the commands it runs); ")
	p("*commands executed* counts every command the masters ran, those run inside scripts included.\n\n")
	for _, k := range profiledKs {
		p("### K = %s\n\n", commas(int64(k)))
		p("| contender | batches/s | batch p50 | client CPU | Redis CPU | cores busy | script calls | µs per script call | commands executed | allocations |\n")
		p("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
		for _, f := range bench.Contenders {
			r, ok := rp.get(f.Name, k, 1, 0, 0)
			if !ok {
				continue
			}
			p("| %s | %s | %s | %s | %s | %.2f | %s | %s | %s | %d |\n", f.Name, num(r.BatchesPerSec()), ms(r.Latency.P50),
				ms(r.PerBatch(r.ClientCPU)), ms(r.PerBatch(r.Server.CPU)), coresBusy(r),
				perBatch(r, r.Server.ScriptCalls), perCall(r.Server.ScriptUsec, r.Server.ScriptCalls), perBatch(r, r.Server.Calls), r.AllocsPerBatch)
		}
		p("\n*Cores busy* is (client CPU + Redis CPU) per batch times batches/s: how much of the machine's %d cores the cell kept busy.\n", runtime.NumCPU())
		p("\n")
		sl, okS := rp.get("slotlock", k, 1, 0, 0)
		raw, okR := rp.get("raw-pipeline", k, 1, 0, 0)
		if okS && okR && sl.Batches > 0 && raw.Batches > 0 {
			writeVsRaw(b, rp, sl, raw)
		}
		if prof := profs[k]; prof != nil {
			writeProfile(b, prof)
		}
	}
}

// writeVsRaw reads slotlock's row of one K against the raw pipeline's.
func writeVsRaw(b *strings.Builder, rp report, sl, raw row) {
	p := func(format string, a ...any) { fmt.Fprintf(b, format, a...) }
	scriptPerBatch := time.Duration(sl.Server.ScriptUsec) * time.Microsecond / time.Duration(sl.Batches)
	rawExec := time.Duration(raw.Server.Usec) * time.Microsecond / time.Duration(raw.Batches)
	p("slotlock against the raw pipeline at K = %s (%.2f× its batches/s):\n\n", commas(int64(sl.K)), sl.BatchesPerSec()/raw.BatchesPerSec())
	lock := "one per master holding some of the keys"
	if sl.K <= batch.BareMax {
		lock = fmt.Sprintf("none while the keys are free (one bare SET NX PX per key, up to %d keys)", batch.BareMax)
	}
	p("- **Round trips.** slotlock made %s script calls per batch: to lock, %s; to release, one per master holding keys (an owner-checked delete is a script on Redis 7.0); each set sent as one pipelined round trip to all masters at once. ",
		perBatch(sl, sl.Server.ScriptCalls), lock)
	p("That is 2 round trips per batch, as for the raw pipeline (%s commands per batch, SET NX then DEL). The peers that take keys one by one make a round trip per key or per slot.\n", perBatch(raw, raw.Server.Calls))
	p("- **Server time.** A slotlock script call took %s µs on its master, %s per batch summed over the masters; the raw pipeline's plain commands took %s per batch. ",
		perCall(sl.Server.ScriptUsec, sl.Server.ScriptCalls), ms(scriptPerBatch), ms(rawExec))
	if sl.K <= batch.BareMax {
		p("slotlock's bare SETs come on top of its script time, at the raw pipeline's cost per SET (commandstats counts a command run inside a script under its own name too, so the two cannot be told apart there). ")
	}
	p("All node CPU (parsing, I/O and replication included): %s per batch for slotlock, %s for raw. The masters work in parallel only as far as %d cores, shared with the client, allow.\n",
		ms(sl.PerBatch(sl.Server.CPU)), ms(raw.PerBatch(raw.Server.CPU)), runtime.NumCPU())
	p("- **Client CPU.** %s per batch for slotlock, %s for raw (%d against %d allocations, %s against %s). Batch latency p50: %s against %s.\n",
		ms(sl.PerBatch(sl.ClientCPU)), ms(raw.PerBatch(raw.ClientCPU)), sl.AllocsPerBatch, raw.AllocsPerBatch,
		bytesText(sl.BytesPerBatch), bytesText(raw.BytesPerBatch), ms(sl.Latency.P50), ms(raw.Latency.P50))
	if seq, ok := rp.get("sequential-setnx", 1, 1, 0, 0); ok && sl.K == 1 && seq.Batches > 0 {
		// At K = 1 the hand-written peer is the smallest owner-checked
		// lock there is: SET NX PX, then a four-line script (GET, compare,
		// DEL), the same two round trips as the raw pipeline.
		p("- **The owner check.** At K = 1 sequential SET NX is the smallest owner-checked lock: SET NX PX, then a script that deletes the key only if it still holds the token (GET, compare, DEL; Redis 7.0 has no compare-and-delete command), in the same two round trips. It made %.2f× the raw pipeline's batches/s here (its script %s µs a call), slotlock %.2f× sequential SET NX (whose release script also handles fenced and marked keys): the part of the gap that is the price of not deleting someone else's lock, and the part that is slotlock's own.\n",
			seq.BatchesPerSec()/raw.BatchesPerSec(), perCall(seq.Server.ScriptUsec, seq.Server.ScriptCalls), sl.BatchesPerSec()/seq.BatchesPerSec())
	}
	slCPU, rawCPU := sl.PerBatch(sl.ClientCPU+sl.Server.CPU), raw.PerBatch(raw.ClientCPU+raw.Server.CPU)
	p("- **CPU budget.** Client and Redis together spend %s of CPU per slotlock batch and %s per raw batch, and the cells kept %.2f and %.2f of the %d cores busy. ",
		ms(slCPU), ms(rawCPU), coresBusy(sl), coresBusy(raw), runtime.NumCPU())
	if coresBusy(sl) > 0.75*float64(runtime.NumCPU()) && coresBusy(raw) > 0.75*float64(runtime.NumCPU()) {
		p("Both are close to CPU-bound here, so their throughput ratio follows their CPU per batch: raw/slotlock CPU is %.2f, the measured batches/s ratio %.2f.\n\n",
			float64(rawCPU)/float64(slCPU), sl.BatchesPerSec()/raw.BatchesPerSec())
	} else {
		p("At least one of them leaves CPU idle: a single worker also waits on the wire, so latency, not CPU alone, sets its pace.\n\n")
	}
}

// coresBusy is the CPU a cell used per second of wall time, client and
// Redis nodes together.
func coresBusy(r row) float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return (r.ClientCPU + r.Server.CPU).Seconds() / r.Elapsed.Seconds()
}

func writeProfile(b *strings.Builder, prof *profileReport) {
	p := func(format string, a ...any) { fmt.Fprintf(b, format, a...) }
	s := prof.Summary
	p("CPU profile of the client during a separate %s run of slotlock at K = %s, W = 1 (%d batches, %.0f batches/s; %s of CPU samples, %s per batch; [`benchmarks/%s`](benchmarks/%s)):\n\n",
		prof.Duration.Round(100*time.Millisecond), commas(int64(prof.K)), prof.Batches, prof.BatchesPerSec(), s.Total.Round(time.Millisecond),
		ms(prof.PerBatch(s.Total)), filepath.Base(prof.Path), filepath.Base(prof.Path))
	p("| where | share of client CPU | per batch |\n|---|---:|---:|\n")
	for _, sh := range s.Buckets {
		p("| %s | %.1f%% | %s |\n", sh.Name, pct(sh.Time, s.Total), ms(prof.PerBatch(sh.Time)))
	}
	p("\nslotlock's own functions, cumulative (the function and everything it calls, rueidis and the runtime included):\n\n")
	p("| function | cumulative | per batch |\n|---|---:|---:|\n")
	for _, sh := range s.Library {
		p("| `%s` | %.1f%% | %s |\n", strings.TrimPrefix(sh.Name, "github.com/slotlock/slotlock/"), pct(sh.Time, s.Total), ms(prof.PerBatch(sh.Time)))
	}
	p("\nOn CPU themselves (flat), the top functions:\n\n")
	p("| function | flat |\n|---|---:|\n")
	for _, sh := range s.Flat {
		p("| `%s` | %.1f%% |\n", sh.Name, pct(sh.Time, s.Total))
	}
	p("\n")
}

func writeMicro(b *strings.Builder, micro *microResult) {
	p := func(format string, a ...any) { fmt.Fprintf(b, format, a...) }
	p("## slot package micro-benchmarks\n\n")
	if micro == nil {
		p("Did not run (see the runner's output).\n\n")
		return
	}
	p("Pure computation, no Redis: `%s` from the root module.\n\n", micro.Command)
	p("```\n%s\n```\n\n", strings.Join(micro.Lines, "\n"))
	ok := micro.KeySlot16NS > 0 && micro.KeySlot16NS < 20 && micro.KeySlot16Allocs == 0
	p("KeySlot of a 16-byte key: %.2f ns, %d allocations; required well under 20 ns with 0 allocations %s.\n\n", micro.KeySlot16NS, micro.KeySlot16Allocs, metText(ok))
}

func dagger(r row) string {
	if r.Foreign > noisy {
		return " †"
	}
	return ""
}

func num(v float64) string {
	switch {
	case v >= 100:
		return commas(int64(v + 0.5))
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.2f", v)
	}
}

func commas(n int64) string {
	s := strconv.FormatInt(n, 10)
	var out []byte
	for i := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			out = append(out, ',')
		}
		out = append(out, s[i])
	}
	return string(out)
}

func perBatch(r row, total int64) string {
	if r.Batches == 0 {
		return ""
	}
	return fmt.Sprintf("%.1f", float64(total)/float64(r.Batches))
}

func perCall(usec, calls int64) string {
	if calls == 0 {
		return "–"
	}
	return fmt.Sprintf("%.1f", float64(usec)/float64(calls))
}

func pct(a, total time.Duration) float64 {
	if total == 0 {
		return 0
	}
	return 100 * float64(a) / float64(total)
}

func bytesText(n int64) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.0f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

func us(d time.Duration) string { return strconv.FormatInt(d.Microseconds(), 10) }
func f1(v float64) string       { return strconv.FormatFloat(v, 'f', 1, 64) }
func f3(v float64) string       { return strconv.FormatFloat(v, 'f', 3, 64) }

func oneLineErr(err error) string {
	s := strings.ReplaceAll(err.Error(), "\n", "; ")
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return s
}
