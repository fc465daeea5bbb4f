package main

import (
	"fmt"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/slotlock/slotlock/bench"
	"github.com/slotlock/slotlock/bench/latency"
)

// writeWire says what the emulated network really did.
func writeWire(b *strings.Builder, m *machine) {
	p := func(format string, a ...any) { fmt.Fprintf(b, format, a...) }
	p("## The emulated network\n\n")
	p("Loopback hides what round trips cost, and this machine has no netem, so cells marked with an RTT put every contender's connections behind `bench/latency`: ")
	p("each chunk a client writes, and each chunk Redis sends back, is held for RTT/2 from the moment it was written, in order, without serialising chunks (a pipelined burst arrives RTT/2 later in one go). ")
	p("Each direction of a connection waits on a timerfd of its own through Go's netpoller (time.Sleep would round sub-millisecond waits up to about 1 ms); the clock is set %s early, the median wake-up overshoot measured at start. ", ms(latency.Lead()))
	p("The client's side only: Redis's replication stays on loopback. Measured through a fresh client at the start of this run (%s = the same without the layer):\n\n", "RTT 0")
	p("| asked RTT | PING p50 | PING p99 | %d-command pipeline p50 (one node, one flush) | pipeline p99 |\n|---:|---:|---:|---:|---:|\n", bench.WirePipeline)
	for _, w := range append([]bench.Wire{m.Floor}, m.Wire...) {
		p("| %s | %s | %s | %s | %s |\n", rttText(w.Asked), ms(w.Ping.P50), ms(w.Ping.P99), ms(w.Pipeline.P50), ms(w.Pipeline.P99))
	}
	p("\nThe added round trip is the row minus the RTT 0 row; the pipeline costs one round trip, not one per command.\n\n")
}

func rttText(d time.Duration) string {
	if d == 0 {
		return "0 (loopback)"
	}
	return ms(d)
}

// addedRTT is the round trip the layer really added to a PING at rtt (the
// asked value when the measurement is missing).
func (m *machine) addedRTT(rtt time.Duration) time.Duration {
	for _, w := range m.Wire {
		if w.Asked == rtt && w.Ping.P50 > m.Floor.Ping.P50 {
			return w.Ping.P50 - m.Floor.Ping.P50
		}
	}
	return rtt
}

// writeTargets writes the targets section: how they are measured, the
// tables of targetRules' readings, the owner check's price, the waits of
// each contended pair, and the retired targets.
func writeTargets(b *strings.Builder, rp report, pairs []*pairTarget, rds []reading) {
	p := func(format string, a ...any) { fmt.Fprintf(b, format, a...) }
	p("## Targets\n\n")
	var dU, dH time.Duration
	for _, t := range pairs {
		if t.A.Hot > 0 {
			dH = t.D
		} else {
			dU = t.D
		}
	}
	p("The project's targets for slotlock, each set against the ceiling this run measures, so that every one is within reach of an owner-checked lock on this machine and the verdict says whether slotlock reaches it. ")
	p("Uncontended, the ceiling is the *checked pipeline* (below): a lock that deletes only its own keys cannot beat it, and slotlock must make ≥ %.2f× its batches/s at every K and round trip; the raw pipeline and sequential SET NX are shown beside it, no verdict. ", ceilingNeed)
	p("A target against sequential SET NX is judged only where the raw pipeline itself made at least that multiple of it in this run. ")
	p("Contended, a batches/s ratio is judged only where the machine had CPU to spare during both cells: fewer than %.1f of its %d cores busy (*cores busy*: /proc/stat over each cell's timed window, other programs included), because on %d cores shared with six Redis nodes a saturated cell measures the machine, not the protocol. ", busyLimit*float64(runtime.NumCPU()), runtime.NumCPU(), runtime.NumCPU())
	p("Where workers wait across Lockers or processes, the targets are what carries over to production, where Redis has cores of its own: Redis commands per batch (INFO commandstats of the masters, inside scripts included) and Redis CPU per batch (every node's) against one Locker's, and the waits at %s.\n\n", ms(bench.FarRTT))
	p("*Paired* decides where a rule has it: after the matrix, the two cells run alternately, so that whatever the machine does meanwhile falls on both; each pair's rounds are in parentheses, and a ratio of batches/s counts as the median, over consecutive rounds taken two at a time (one with each side first, so that whatever the order does to a round cancels), of their geometric means; commands, CPU and wait p99 count as the median round's, the longest wait as the longest of any round. ")
	p("Uncontended pairs (W = 1) run batch by batch within each round (A's batch, B's, A's, ... for %s, the side that starts alternating from round to round, each side drawing keys in a sequence of its own; each side's batches/s is its batches over the time spent in them), because whole cells one after the other caught the machine in different states more often than they compared the contenders (docs/design.md, \"The uncontended pairs, batch by batch\"); contended pairs run as cells of %s, A B, B A, A B, .... ", ms(2*dU), ms(dH))
	p("*Matrix* is the figure of the single cells in the tables below (the checked pipeline is not in the matrix).\n\n")
	writeTargetTables(b, rp, pairs, rds)
	p("**The price of the owner check.** A lock must not delete a key that expired and was taken by someone else, so its release compares the key's value with its token before deleting; Redis 7.0 has no command that does both, so that is a script, and a script costs the master two commands per key (GET, DEL) run from Lua where the raw pipeline sends one plain DEL. ")
	p("*checked pipeline* is the raw pipeline with nothing added but that: the same SET NX PX in one DoMulti, then one call per master of the smallest owner-checked release script (`bench/scripts/release_node.lua`: GET every key, DEL those still holding the token), all in one DoMulti. ")
	p("Its ratio to the raw pipeline (beside the uncontended targets, paired where this run has the pair) is the ceiling of every lock that takes keys with SET NX and releases them owner-checked, as slotlock does, on this server. Where slotlock's own part of the gap goes is measured in docs/design.md (\"What the owner check costs, on loopback\").\n\n")
	p("Contended waits of each paired round, the first side's and the second's:\n\n")
	p("| pair | first side's wait p99 per round | second side's | first side's longest wait |\n|---|---|---|---:|\n")
	for _, t := range pairs {
		if t.A.Hot == 0 {
			continue
		}
		aR, bR := t.side(t.A), t.side(t.B)
		var a, bb []string
		var worst time.Duration
		for i := range min(len(aR), len(bR)) {
			a = append(a, ms(aR[i].Wait.P99))
			bb = append(bb, ms(bR[i].Wait.P99))
		}
		for _, r := range aR {
			if r.Err == nil {
				worst = max(worst, r.Wait.Max)
			}
		}
		p("| %s | %s | %s | %s |\n", t.Label, strings.Join(a, ", "), strings.Join(bb, ", "), ms(worst))
	}
	p("\n")
	writeRetired(b, rp, pairs, rds)
}

func writeThroughput(b *strings.Builder, rp report) {
	p := func(format string, a ...any) { fmt.Fprintf(b, format, a...) }
	p("## Uncontended, by round trip\n\n")
	p("One worker. Batches per second, and in parentheses the ratio to slotlock in the same column; then the latency of one batch (lock + release), p50 / p99. ")
	if gap, ok := rp.noise(); ok {
		p("slotlock and slotlock-multi are the same configuration at W = 1: the gap between them on loopback, up to %.0f%% here, is this run's noise. ", 100*gap)
	}
	p("A † marks a cell during which other programs used more than %.1f of a core; a dash, a cell not run (the one-key-at-a-time peers at K = 1,000 behind a round trip are left out of short runs).\n\n", noisy)
	for _, rtt := range bench.RTTs {
		ks := bench.Ks
		p("### RTT %s\n\n| contender |", rttText(rtt))
		for _, k := range ks {
			p(" K = %d |", k)
		}
		p("")
		for _, k := range ks {
			p(" p50 / p99, K = %d |", k)
		}
		p("\n|---|%s%s\n", strings.Repeat("---:|", len(ks)), strings.Repeat("---:|", len(ks)))
		for _, f := range bench.Contenders {
			p("| %s |", f.Name)
			for _, k := range ks {
				r, ok := rp.get(f.Name, k, 1, 0, rtt)
				if !ok {
					p(" %s |", missing(rp, bench.Cell{Contender: f.Name, K: k, W: 1, RTT: rtt}))
					continue
				}
				ratio, _ := rp.ratio(f.Name, "slotlock", k, 1, 0, rtt)
				p(" %s (%.2f×)%s |", num(r.BatchesPerSec()), ratio, dagger(r))
			}
			for _, k := range ks {
				if r, ok := rp.get(f.Name, k, 1, 0, rtt); ok {
					p(" %s / %s |", ms(r.Latency.P50), ms(r.Latency.P99))
				} else {
					p(" – |")
				}
			}
			p("\n")
		}
		p("\n")
	}
	p("Keys per second against K, log-log, one panel per round trip (solid: slotlock; dashed: the peers; dotted: the raw ceiling):\n\n")
	p("![keys per second against K](benchmarks/keys-per-second.svg)\n\n")
	for _, r := range rp.rows {
		if r.Err != nil {
			p("- FAILED %s: %v\n", r.Name(), oneLineErr(r.Err))
		}
	}
	p("\n")
}

// missing says why a cell has no row: it failed, or it did not run.
func missing(rp report, c bench.Cell) string {
	for _, r := range rp.rows {
		if r.Cell == c {
			return "FAILED"
		}
	}
	return "–"
}

// writeRoundTrips explains, per round trip, where a batch's time goes:
// how many round trips sit on its critical path, counted two ways.
func writeRoundTrips(b *strings.Builder, rp report, m *machine) {
	p := func(format string, a ...any) { fmt.Fprintf(b, format, a...) }
	p("## Where the time goes behind a round trip\n\n")
	p("Behind a network a batch costs its CPU (the loopback cell) plus one RTT per round trip on its critical path. ")
	p("*Round trips* is (batch p50 at that RTT − batch p50 on loopback) / (the round trip the layer really added to a PING, from the table above): the round trips a batch waited for, one after the other (nodes answering in parallel count once); at K = 1,000 the loopback cell's own spread is of the order of an RTT and makes this figure rough. ")
	p("*Flushes* counts the chunks the contender's clients wrote per batch (one command, or one pipelined burst to one node: a DoMulti over 3 masters is 3 flushes in one round trip). ")
	p("*Commands* is what the masters executed per batch (INFO commandstats; inside scripts included).\n\n")
	for _, rtt := range bench.RTTs[1:] {
		added := m.addedRTT(rtt)
		p("### RTT %s (measured: %s added to a PING)\n\n| contender |", ms(rtt), ms(added))
		for _, k := range bench.Ks {
			p(" K = %d: round trips · flushes · commands |", k)
		}
		p("\n|---|%s\n", strings.Repeat("---:|", len(bench.Ks)))
		for _, f := range bench.Contenders {
			p("| %s |", f.Name)
			for _, k := range bench.Ks {
				r, ok := rp.get(f.Name, k, 1, 0, rtt)
				base, okB := rp.get(f.Name, k, 1, 0, 0)
				if !ok {
					p(" – |")
					continue
				}
				trips := "?"
				if okB {
					trips = fmt.Sprintf("%.1f", float64(r.Latency.P50-base.Latency.P50)/float64(added))
				}
				p(" %s · %s · %s |", trips, perBatch(r, r.WireWrites), perBatch(r, r.Server.Calls))
			}
			p("\n")
		}
		p("\n")
	}
	p("The one-key-at-a-time peers pay a round trip per key (sequential SET NX to lock; redsync, rueidislock and redislock to release too), so at K = 1,000 their batch is about 1,000 to 2,000 RTTs long, while slotlock and the raw pipeline stay at two round trips whatever K is, and their remaining gap is CPU, as on loopback.\n\n")
}

// writeOthers reports what big batches cost another client of the
// cluster.
func writeOthers(b *strings.Builder, rp report) {
	p := func(format string, a ...any) { fmt.Fprintf(b, format, a...) }
	p("## The cost to everyone else\n\n")
	p("During every K = 1,000 cell another client (its own connections, never delayed) sent one GET at a time, about every millisecond, to keys on every master. ")
	p("A node runs a script alone: while a contender's script call for hundreds of keys runs, that node's other clients wait. Their GETs' latency:\n\n")
	p("| contender | RTT | GETs | p50 | p99 | max |\n|---|---:|---:|---:|---:|---:|\n")
	for _, rtt := range bench.RTTs {
		for _, f := range bench.Contenders {
			r, ok := rp.get(f.Name, 1000, 1, 0, rtt)
			if !ok || r.OthersN == 0 {
				continue
			}
			p("| %s | %s | %d | %s | %s | %s |\n", f.Name, rttText(rtt), r.OthersN, ms(r.Others.P50), ms(r.Others.P99), ms(r.Others.Max))
		}
	}
	p("\nThe raw pipeline runs no script: its rows are the floor of this machine (2 shared cores). slotlock bounds its own stall by splitting a node's keys into script calls of at most `batch.MaxCallKeys` (512) keys, sent in the same round trip (docs/design.md, \"A bound on one call's server time\", measures K = 10,000 and 100,000); at K = 1,000 a master's share, about 333 keys, is one call.\n\n")
}

func writeContended(b *strings.Builder, rp report) {
	p := func(format string, a ...any) { fmt.Fprintf(b, format, a...) }
	p("## Contended\n\n")
	p("%d workers, K = %d keys per batch drawn from %d hot keys: most batches collide with several others. ", bench.ContendedW, bench.ContendedK, bench.HotKeys)
	p("slotlock waits in its in-process queue and on release messages; rueidislock waits on invalidations; the others retry after a jittered backoff (1 to 64 ms).\n\n")
	for _, rtt := range bench.HotRTTs {
		p("### RTT %s\n\n", rttText(rtt))
		if rtt > bench.ContendedRTT {
			p("slotlock's two forms and the peers that did best at the shorter round trips (bench.HotAt): the others' cells take seconds here and were never near them.\n\n")
		}
		p("| contender | batches/s | keys/s | vs slotlock | latency p50 | latency p99 | wait p99 | longest wait | commands per batch |\n")
		p("|---|---:|---:|---:|---:|---:|---:|---:|---|\n")
		for _, f := range bench.Contenders {
			if !bench.HotAt(f.Name, rtt) {
				continue
			}
			c := bench.Contended(f.Name, rtt)
			r, ok := find(rp.rows, c)
			if !ok {
				p("| %s | %s | | | | | | | |\n", f.Name, missing(rp, c))
				continue
			}
			ratio, _ := rp.ratio(f.Name, "slotlock", bench.ContendedK, bench.ContendedW, bench.HotKeys, rtt)
			p("| %s | %s%s | %s | %.2f× | %s | %s | %s | %s | %s |\n", f.Name, num(r.BatchesPerSec()), dagger(r), num(r.KeysPerSec()), ratio,
				ms(r.Latency.P50), ms(r.Latency.P99), ms(r.Wait.P99), ms(r.Wait.Max), commandMix(r, 5))
		}
		p("\n")
	}
	writeStalls(b, rp)
}

// writeProcs reports the contended cell with slotlock's workers in
// separate processes, at each round trip of the process cells.
func writeProcs(b *strings.Builder, rp report) {
	p := func(format string, a ...any) { fmt.Fprintf(b, format, a...) }
	p("## Separate processes\n\n")
	p("The contended cell with slotlock's %d workers spread over separate OS processes (the benchmark binary re-executed), each process with its own client and Locker, as instances of a service would have: ", bench.ContendedW)
	p("workers of different processes cannot queue for each other in memory and meet only in Redis. ")
	p("Exclusion is checked across processes: each reports when each batch was held (CLOCK_MONOTONIC, from Lock's return to before Release), and the parent replays every interval through the same exclusion table as the in-process check. The processes start together after each verified its keys.\n\n")
	p("Every Go process starts with GOMAXPROCS = all the machine's CPUs (%d here). Instances of a service on hosts of their own each get their own cores; here all the processes share these %d cores with the 6 Redis nodes, and %d processes with GOMAXPROCS %d each may run %d threads of Go code at once on them. ", runtime.NumCPU(), runtime.NumCPU(), slices.Max(bench.ProcsSplits), runtime.NumCPU(), slices.Max(bench.ProcsSplits)*runtime.NumCPU())
	p("So each process is given its share of the machine, GOMAXPROCS = max(1, CPUs / processes) (the parent checks that every process ran with it); with Go's default the splits were only slower here (bench.ProcCells has the last figures). ")
	p("*Cores busy (client + Redis)* is the client's CPU (every process) and the six Redis nodes' per batch times batches/s; *machine's cores busy* is the whole machine's over the cell's timed window (/proc/stat, other programs included): at %d, nothing is left for anyone, and a cell's batches/s says what the machine can do, not what the protocol could, which is why the targets judge these ratios only below %.1f and bound the Redis commands and Redis CPU per batch instead.\n\n", runtime.NumCPU(), busyLimit*float64(runtime.NumCPU()))
	p("*vs one Locker* is each row's batches/s against the one-Locker cell its target compares it with: a split of the workers over processes against 1 × %d in a process of its own (the first row), one Locker per worker against one Locker in this process; the last row compares the two one-Locker cells.\n\n", bench.ContendedW)
	for _, rtt := range bench.ProcRTTs {
		p("### RTT %s\n\n", rttText(rtt))
		p("| processes × workers | GOMAXPROCS per process | batches/s | vs one Locker | latency p50 | latency p99 | wait p99 | longest wait | client CPU per batch | Redis commands per batch | Redis CPU per batch | cores busy (client + Redis) | machine's cores busy |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
		child, here := oneProcess(rtt), bench.Contended("slotlock", rtt)
		line := func(what, gmp string, c, base bench.Cell) {
			r, ok := find(rp.rows, c)
			if !ok {
				p("| %s | %s | %s | | | | | | | | | | |\n", what, gmp, missing(rp, c))
				return
			}
			vs := "–"
			if x, ok := rp.cellRatio(c, base); ok {
				vs = fmt.Sprintf("%.2f×", x)
			}
			p("| %s | %s | %s%s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", what, gmp, num(r.BatchesPerSec()), dagger(r), vs, ms(r.Latency.P50), ms(r.Latency.P99), ms(r.Wait.P99), ms(r.Wait.Max), ms(r.PerBatch(r.ClientCPU)),
				perBatch(r, r.Server.Calls), ms(r.PerBatch(r.Server.CPU)), busy(r), machineBusyText(r))
		}
		for _, c := range bench.ProcCells(rtt) {
			gmp := fmt.Sprintf("%d (default)", runtime.NumCPU())
			if c.MaxProcs > 0 {
				gmp = fmt.Sprintf("%d (its share)", c.MaxProcs)
			}
			line(fmt.Sprintf("%d × %d", c.Procs, bench.ContendedW/c.Procs), gmp, c, child)
		}
		gmp := fmt.Sprint(runtime.GOMAXPROCS(0))
		line(fmt.Sprintf("1 × %d, in this process, one Locker per worker (slotlock-multi)", bench.ContendedW), gmp, bench.Contended("slotlock-multi", rtt), here)
		line(fmt.Sprintf("1 × %d, in this process, one Locker (the matrix's cell)", bench.ContendedW), gmp, here, child)
		p("\n")
	}
}

// machineBusyText is a row's MachineBusy for a table, a dash when it
// was not measured.
func machineBusyText(r row) string {
	if r.MachineBusy <= 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f", r.MachineBusy)
}

// busy is coresBusy for a table, a dash when the row measured nothing.
func busy(r row) string {
	if r.Batches == 0 || r.Elapsed <= 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f", coresBusy(r))
}
