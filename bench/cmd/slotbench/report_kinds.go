package main

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/slotlock/slotlock/bench"
)

// writeKinds is the section on every kind of lease: what each cell asks
// for, and its figures from the pairs (or the matrix, for permits).
func writeKinds(b *strings.Builder, rp report, pairs []*pairTarget) {
	p := func(format string, a ...any) { fmt.Fprintf(b, format, a...) }
	p("## Kinds of lease\n\n")
	p("The contended cell's %d workers over the %d hot keys at RTT %s, each worker with a Locker of its own in this process, or %d processes of %d workers with one Locker each, every request through `Locker.Acquire` with `Wait` %s: a request still waiting then gives up, and counts as a wait that *ran out* (not a grant, not an error). ",
		bench.ContendedW, bench.HotKeys, rttText(bench.KindRTT), bench.KindProcs, bench.ContendedW/bench.KindProcs, ms(bench.KindWait))
	p("*Mixed* requests take 0-%d exclusive and 0-%d shared keys (at least one key); *the same all exclusive* makes the same requests in the same order (same seeds) with every key exclusive. ", bench.MixedExclusive, bench.MixedShared)
	p("*Plain*, *reentrant* (`WithOwner`, one owner per worker) and *per-slot* (`Options.PerSlot`) take %d exclusive keys. ", bench.ContendedK)
	p("*Permits* ask for 1-%d units of one or two of %d resources of %d units each, and no keys. ", bench.PermitUnits, bench.PermitResources, bench.PermitLimit)
	p("Grants/s counts the grants within the cell's time, over that time; a request granted after it (it may have waited up to %s) counts in the waits only.\n\n", ms(bench.KindWait))
	p("Holds are checked as for the other cells, by kind: before timing, each exclusive key is read back holding the lease's token (a reentrant lease's keys: all one holder, the owner token being the Locker's secret) and each shared key holding a shared value; during timing, the exclusion table lets readers of a key overlap each other and nothing else, and counts each resource's units, a count above its limit being a violation; across processes the parent replays every process's holds, shared keys and permits included, through the same table.\n\n")
	p("These cells run only in the pairs their targets read (%d rounds each, as many in each order), and the permit cells in the matrix: as matrix cells too the paired kinds would cost `make bench` about 70 s more.\n\n", kindRounds)
	p("| kind | where | rounds | grants/s | wait p99 | longest wait | waits that ran out |\n|---|---|---:|---:|---:|---:|---:|\n")
	for _, procs := range []int{0, bench.KindProcs} {
		for _, k := range bench.Kinds {
			c := bench.KindCell(k, bench.KindRTT, procs)
			where := strings.TrimPrefix(cellText(c), kindText(k)+", ")
			var rows []row
			for _, t := range pairs {
				if t.Err == nil && (t.A == c || t.B == c) {
					rows = t.side(c)
					break
				}
			}
			if len(rows) == 0 {
				if r, ok := find(rp.rows, c); ok {
					rows = []row{r}
				}
			}
			rows = slices.DeleteFunc(rows, func(r row) bool { return r.Err != nil })
			if len(rows) == 0 {
				p("| %s | %s | – | not measured | | | |\n", kindText(k), where)
				continue
			}
			var longest time.Duration
			for _, r := range rows {
				longest = max(longest, r.Wait.Max)
			}
			n, _ := ranOutOf(rows)
			p("| %s | %s | %d | %s | %s | %s | %d |\n", kindText(k), where, len(rows), num(medianOf(batchesPerSec(rows))), ms(medianOf(waitP99s(rows))), ms(longest), n)
		}
	}
	p("\nGrants/s and wait p99 are the median of the rounds, the longest wait and the waits that ran out of every round.\n\n")
}
