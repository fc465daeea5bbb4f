package main

import (
	"fmt"
	"io"
	"math"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/slotlock/slotlock/bench"
)

// The project's targets for slotlock, each a rule in one table
// (targetRules): the cells it reads, what it reads from them, the bound,
// and when this run can judge it at all. A target is set against the
// ceiling the same run measures, never above it: uncontended, against the
// checked pipeline (the raw pipeline with nothing added but an
// owner-checked release), which no lock that releases only its own keys
// can beat; against sequential SET NX only where the raw pipeline itself
// reaches the target (reachable); a batches/s ratio of contended cells only
// where the machine had CPU to spare (spareCPU), since on two cores shared
// with six Redis nodes a saturated cell measures the machine. Where slotlock
// waits across processes, the targets are what carries over to a
// production cluster, whose Redis has cores of its own: Redis commands and
// Redis CPU per batch, and the waits.
//
// A new cell's target is one more entry in targetRules; the pairs that
// measure it (targetPairs) and its row in the report follow from it.

// metric is what a rule reads from its cells.
type metric int

const (
	// batchRatio is A's batches/s over B's; at least Need.
	batchRatio metric = iota
	// commandsPerBatch is A's Redis commands per batch (INFO commandstats
	// of the masters, the commands run inside scripts included); at most
	// Need. B is shown beside it.
	commandsPerBatch
	// redisCPURatio is A's Redis CPU per batch (every node's, replication
	// included) over B's; at most Need.
	redisCPURatio
	// waitP99 is A's wait p99 (the median round's, paired); at most Need
	// (a time.Duration as float64). B is shown beside it.
	waitP99
	// longestWait is A's longest wait (of every round, paired); at most
	// Need.
	longestWait
	// waitP99Ratio is A's wait p99 over B's (the median round's,
	// paired); at most Need.
	waitP99Ratio
	// ranOut is how many of A's requests gave up waiting (a kind cell:
	// bench.KindWait), summed over every round; at most Need.
	ranOut
)

// name is what a metric measures, for sentences.
func (m metric) name() string {
	return [...]string{"batches/s ratio", "Redis commands per batch", "Redis CPU per batch", "wait p99", "longest wait", "wait p99 ratio", "waits that ran out"}[m]
}

// atMost says whether a metric's target is a ceiling (commands, CPU,
// waits) rather than a floor (batches/s).
func (m metric) atMost() bool { return m != batchRatio }

// gate is when a rule gives a verdict.
type gate int

const (
	// always: the figure alone decides.
	always gate = iota
	// reachable: only where the ratio of the Ceiling cells in this run
	// (the raw pipeline against the same contender) reaches Need: a lock
	// cannot beat a pipeline that checks nothing.
	reachable
	// spareCPU: only where the machine kept fewer than busyLimit of its
	// cores busy during both cells.
	spareCPU
	// reference: never; a figure shown for what it says (a retired
	// target's, for one).
	reference
	// cleanB: only where none of B's waits ran out (the target is "no
	// wait runs out where B has none").
	cleanB
)

// busyLimit is the share of the machine's cores (1.6 of 2) that a cell
// may keep busy, other programs included (bench.Result.MachineBusy), for
// a spareCPU rule to judge it.
const busyLimit = 0.8

// rule is one target: A's Metric against Need, B being what A is compared
// with (for an absolute bound, the cell shown beside it).
type rule struct {
	Group  string
	Label  string
	A, B   bench.Cell
	Metric metric
	Need   float64
	Gate   gate
	// Ceiling are the cells whose batches/s ratio must reach Need for a
	// reachable rule to be judged.
	Ceiling [2]bench.Cell
	// Rounds > 0: A and B run alternately (a pairTarget) that many times
	// after the matrix and the rounds decide; otherwise the matrix's two
	// cells do. Rules of the same two cells share one pair.
	Rounds int
	// Beside are ratios shown next to the figure, no verdict (the raw
	// pipeline and sequential SET NX beside the owner-checked ceiling).
	Beside [][2]bench.Cell
	// Floor, when set, is the reservation floor's cell (bench.FloorCell)
	// whose Redis commands or CPU per batch are shown beside A's: the part
	// of A's cost that is the path itself, before any queue work.
	Floor bench.Cell
}

// The groups of the targets table, in order.
const (
	groupCeiling  = "Uncontended: slotlock against the owner-checked ceiling"
	groupSeq      = "Uncontended: against sequential SET NX, where the raw pipeline reaches the target"
	groupAcross   = "Contended, waiting across Lockers and processes: what carries over to production"
	groupContRate = "Contended: batches/s ratios, judged where the machine had CPU to spare"
	groupKinds    = "Contended, every kind of lease against exclusive leases of the same workload"
)

// Targets' figures.
const (
	// ceilingNeed is slotlock's batches/s against the checked pipeline,
	// uncontended, at every K and round trip.
	ceilingNeed = 0.97
	// seqNeed is slotlock's batches/s against sequential SET NX at K =
	// 1,000 behind a round trip, where the raw pipeline reaches it.
	seqNeed = 100
	// acrossCommands and acrossCPU bound a contended batch (K = 10) that
	// waits across Lockers or processes: Redis commands per batch, and
	// Redis CPU per batch against one Locker's in the same run.
	acrossCommands = 60
	acrossCPU      = 2
	// acrossWaitP99 and acrossWaitMax bound its waits at FarRTT.
	acrossWaitP99 = 30 * time.Millisecond
	acrossWaitMax = 100 * time.Millisecond
	// acrossRate is the batches/s of one Locker per worker, and of 4 × 4
	// processes, against one Locker (spareCPU).
	acrossRate = 0.75
)

// Kinds of lease (bench.Kinds), contended, at bench.KindRTT, one Locker
// per worker in one process and one per process over bench.KindProcs
// processes: mixed shared/exclusive requests against the same requests
// all exclusive (batches/s, at least mixedRate; wait p99, at most
// mixedWaitP99 of the all-exclusive cell's; no wait running out where the
// all-exclusive cell has none), reentrant leases and per-slot Lockers
// against plain leases (batches/s, at least kindRate; no wait running
// out). Permits have no target: their figures are shown.
const (
	mixedRate    = 1.0
	mixedWaitP99 = 1.2
	kindRate     = 0.9
	// kindRounds is the rounds of each kind pair, balanced (as many in
	// each order): four, since these cells sit near their targets and
	// one noisy round in two decided a verdict. The six pairs cost about
	// two minutes of make bench.
	kindRounds = 4
)

// Rounds of the pairs: pairRounds by default; k1Rounds at K = 1 on
// loopback; four for the contended cells across processes (whose cells
// cost two to three times an uncontended one, and a process start each).
const (
	uncontendedRounds = 6
	acrossRounds      = 4
)

// targetRules lists every target, in the order of the report. The
// best-peer rules need the matrix's rows (which peer was best); without
// rows they are left out.
func targetRules(rows []row) []rule {
	var out []rule
	add := func(r rule) { out = append(out, r) }
	unc := func(name string, k int, rtt time.Duration) bench.Cell {
		return bench.Cell{Contender: name, K: k, W: 1, RTT: rtt}
	}
	for _, rtt := range bench.RTTs {
		for _, k := range bench.Ks {
			sl, chk := unc("slotlock", k, rtt), unc(bench.CheckedPipeline, k, rtt)
			raw, seq := unc("raw-pipeline", k, rtt), unc("sequential-setnx", k, rtt)
			rounds := uncontendedRounds
			if k == 1 && rtt == 0 {
				rounds = k1Rounds
			}
			add(rule{Group: groupCeiling, Label: ratioLabel(sl, chk), A: sl, B: chk, Metric: batchRatio, Need: ceilingNeed, Rounds: rounds,
				Beside: [][2]bench.Cell{{chk, raw}, {sl, raw}, {sl, seq}}})
		}
	}
	for _, rtt := range bench.RTTs[1:] {
		sl, seq, raw := unc("slotlock", 1000, rtt), unc("sequential-setnx", 1000, rtt), unc("raw-pipeline", 1000, rtt)
		add(rule{Group: groupSeq, Label: ratioLabel(sl, seq), A: sl, B: seq, Metric: batchRatio, Need: seqNeed,
			Gate: reachable, Ceiling: [2]bench.Cell{raw, seq}, Rounds: uncontendedRounds})
	}
	for _, rtt := range bench.ProcRTTs {
		multi, one := bench.Contended("slotlock-multi", rtt), bench.Contended("slotlock", rtt)
		split, child := procCell(bench.ContendedW, rtt), oneProcess(rtt)
		for _, c := range [][2]bench.Cell{{multi, one}, {split, child}} {
			// 16 × 1 pairs only at FarRTT, where its waits are bounded
			// (at 200 µs one Locker alone keeps 1.5 cores busy and
			// pairing would cost a minute of a 12-minute run).
			rounds := acrossRounds
			if c[0].Procs > 0 && rtt != bench.FarRTT {
				rounds = 0
			}
			floor := bench.FloorCell(rtt)
			add(rule{Group: groupAcross, Label: metricLabel(c[0], "Redis commands per batch"), A: c[0], B: c[1], Metric: commandsPerBatch, Need: acrossCommands, Rounds: rounds, Floor: floor})
			add(rule{Group: groupAcross, Label: metricLabel(c[0], "Redis CPU per batch against "+cellText(c[1])), A: c[0], B: c[1], Metric: redisCPURatio, Need: acrossCPU, Rounds: rounds, Floor: floor})
			if rtt == bench.FarRTT {
				add(rule{Group: groupAcross, Label: metricLabel(c[0], "wait p99"), A: c[0], B: c[1], Metric: waitP99, Need: float64(acrossWaitP99), Rounds: rounds})
				add(rule{Group: groupAcross, Label: metricLabel(c[0], "longest wait"), A: c[0], B: c[1], Metric: longestWait, Need: float64(acrossWaitMax), Rounds: rounds})
			}
		}
	}
	for _, rtt := range bench.ProcRTTs {
		multi, one := bench.Contended("slotlock-multi", rtt), bench.Contended("slotlock", rtt)
		add(rule{Group: groupContRate, Label: ratioLabel(multi, one), A: multi, B: one, Metric: batchRatio, Need: acrossRate, Gate: spareCPU, Rounds: acrossRounds})
	}
	split4, split16, child := procCell(4, bench.FarRTT), procCell(bench.ContendedW, bench.FarRTT), oneProcess(bench.FarRTT)
	add(rule{Group: groupAcross, Label: metricLabel(split4, "wait p99"), A: split4, B: child, Metric: waitP99, Need: float64(acrossWaitP99), Rounds: acrossRounds})
	add(rule{Group: groupAcross, Label: metricLabel(split4, "longest wait"), A: split4, B: child, Metric: longestWait, Need: float64(acrossWaitMax), Rounds: acrossRounds})
	add(rule{Group: groupContRate, Label: ratioLabel(split4, child), A: split4, B: child, Metric: batchRatio, Need: acrossRate, Gate: spareCPU, Rounds: acrossRounds})
	// Retired as a target (16 runtimes and six nodes keep the two cores
	// busy): a reference, its busy cores beside it.
	add(rule{Group: groupContRate, Label: ratioLabel(split16, child), A: split16, B: child, Metric: batchRatio, Need: acrossRate, Gate: reference, Rounds: acrossRounds})
	// The wide cell, one Locker per worker and 4 × 2 processes against
	// one Locker and one process: figures beside the targets (which are
	// set for K = 10), so that a burst of hand-offs to a waiter of many
	// keys is measured in every run.
	wide := [][2]bench.Cell{
		{bench.WideCell("slotlock-multi", 0), bench.WideCell("slotlock", 0)},
		{bench.WideCell("slotlock", bench.KindProcs), bench.WideCell("slotlock", 1)},
	}
	for _, c := range wide {
		for _, m := range []metric{batchRatio, commandsPerBatch, waitP99, longestWait} {
			label := metricLabel(c[0], m.name())
			if m == batchRatio {
				label = ratioLabel(c[0], c[1])
			}
			add(rule{Group: groupAcross, Label: label, A: c[0], B: c[1], Metric: m, Gate: reference, Rounds: acrossRounds})
		}
	}
	for _, procs := range []int{0, bench.KindProcs} {
		kind := func(k string) bench.Cell { return bench.KindCell(k, bench.KindRTT, procs) }
		mixed, excl, plain := kind(bench.KindMixed), kind(bench.KindAllExcl), kind(bench.KindPlain)
		add(rule{Group: groupKinds, Label: ratioLabel(mixed, excl), A: mixed, B: excl, Metric: batchRatio, Need: mixedRate, Gate: spareCPU, Rounds: kindRounds})
		add(rule{Group: groupKinds, Label: metricLabel(mixed, "wait p99 against "+cellText(excl)), A: mixed, B: excl, Metric: waitP99Ratio, Need: mixedWaitP99, Rounds: kindRounds})
		add(rule{Group: groupKinds, Label: metricLabel(mixed, "waits that ran out"), A: mixed, B: excl, Metric: ranOut, Need: 0, Gate: cleanB, Rounds: kindRounds})
		for _, k := range []string{bench.KindReentrant, bench.KindPerSlot} {
			c := kind(k)
			add(rule{Group: groupKinds, Label: ratioLabel(c, plain), A: c, B: plain, Metric: batchRatio, Need: kindRate, Gate: spareCPU, Rounds: kindRounds})
			add(rule{Group: groupKinds, Label: metricLabel(c, "waits that ran out"), A: c, B: plain, Metric: ranOut, Need: 0, Rounds: kindRounds})
		}
		permits := kind(bench.KindPermits)
		add(rule{Group: groupKinds, Label: metricLabel(permits, "waits that ran out"), A: permits, B: permits, Metric: ranOut, Gate: reference})
	}
	if rows != nil {
		for _, rtt := range bench.HotRTTs {
			// On loopback 2.5x: the peers' backoff costs them least there.
			need := 3.0
			if rtt == 0 {
				need = 2.5
			}
			if best, ok := (report{rows: rows}).bestPeer(rtt); ok {
				a := bench.Contended("slotlock", rtt)
				add(rule{Group: groupContRate, Label: ratioLabel(a, best.Cell) + " (the best peer)", A: a, B: best.Cell, Metric: batchRatio, Need: need, Gate: spareCPU, Rounds: pairRounds(config{})})
			}
		}
	}
	return out
}

// ceilingPairs are the reference pairs run beside the targets, four
// rounds each (k1Rounds at K = 1 on loopback, as its target): the checked
// pipeline against the raw pipeline at the cells where the retired
// targets asked slotlock for more than that (K = 1,000, 100 and 1 on
// loopback, K = 1,000 behind each round trip), so that the report shows
// the owner check's price from the same run.
func ceilingPairs() []*pairTarget {
	var out []*pairTarget
	add := func(k int, rtt time.Duration) {
		rounds := 4
		if k == 1 && rtt == 0 {
			rounds = k1Rounds
		}
		out = append(out, &pairTarget{
			A:      bench.Cell{Contender: bench.CheckedPipeline, K: k, W: 1, RTT: rtt},
			B:      bench.Cell{Contender: "raw-pipeline", K: k, W: 1, RTT: rtt},
			Rounds: rounds,
		})
	}
	for _, k := range bench.Ks {
		add(k, 0)
	}
	for _, rtt := range bench.RTTs[1:] {
		add(1000, rtt)
	}
	return out
}

// procCell is the process cell of procs processes at rtt.
func procCell(procs int, rtt time.Duration) bench.Cell {
	for _, c := range bench.ProcCells(rtt) {
		if c.Procs == procs {
			return c
		}
	}
	panic(fmt.Sprintf("slotbench: bench.ProcsSplits has no split of %d processes", procs))
}

// cellText names what a cell measures, for labels.
func cellText(c bench.Cell) string {
	if c.Kind != "" {
		where := "one Locker per worker"
		if c.Procs > 0 {
			where = fmt.Sprintf("%d × %d processes", c.Procs, c.W/c.Procs)
		}
		return kindText(c.Kind) + ", " + where
	}
	if c.Procs > 0 {
		return fmt.Sprintf("%d × %d processes", c.Procs, c.W/c.Procs)
	}
	if c.Hot > 0 {
		switch c.Contender {
		case "slotlock":
			return "one Locker"
		case "slotlock-multi":
			return "one Locker per worker"
		}
	}
	switch c.Contender {
	case bench.CheckedPipeline:
		return "checked pipeline"
	case "raw-pipeline":
		return "raw pipeline"
	case "sequential-setnx":
		return "sequential SET NX"
	}
	return c.Contender
}

// kindText names a kind of lease (bench.Kinds).
func kindText(kind string) string {
	switch kind {
	case bench.KindPlain:
		return "plain leases"
	case bench.KindMixed:
		return "mixed shared/exclusive"
	case bench.KindAllExcl:
		return "the same all exclusive"
	case bench.KindPermits:
		return "permits"
	case bench.KindReentrant:
		return "reentrant (WithOwner)"
	case bench.KindPerSlot:
		return "per-slot Lockers"
	}
	return kind
}

// whereText is a cell's K (or contended) and round trip.
func whereText(c bench.Cell) string {
	s := "K = " + commas(int64(c.K))
	switch {
	case c.Hot > 0 && c.Hot != bench.HotKeys:
		s = fmt.Sprintf("contended, K = %s of %s keys", commas(int64(c.K)), commas(int64(c.Hot)))
	case c.Hot > 0:
		s = "contended"
	}
	if c.RTT == 0 {
		return s + ", loopback"
	}
	return s + ", RTT " + ms(c.RTT)
}

func ratioLabel(a, b bench.Cell) string {
	return whereText(a) + ": " + cellText(a) + " / " + cellText(b)
}

func metricLabel(a bench.Cell, what string) string {
	return whereText(a) + ": " + cellText(a) + ", " + what
}

// outcome is a rule's verdict.
type outcome int

const (
	met outcome = iota
	notMet
	noVerdict
)

// verdict is an outcome and, without one, why.
type verdict struct {
	Outcome outcome
	Why     string
}

func (v verdict) String() string {
	switch v.Outcome {
	case met:
		return "met"
	case notMet:
		return "**not met**"
	}
	return "no verdict: " + v.Why
}

// conditions are what a rule's gate reads: the ceiling's ratio in this
// run (ok false: not measured), and the machine's busy cores during A's
// and B's cells (0: not measured) out of cpus.
type conditions struct {
	Ceiling      float64
	CeilingOK    bool
	BusyA, BusyB float64
	CPUs         int
	// RanOutB is how many of B's waits ran out (a cleanB rule),
	// RanOutBOK whether B was measured.
	RanOutB   int
	RanOutBOK bool
}

// judge is the verdict of a rule on its figure: none where the figure is
// missing, the rule is a reference, the ceiling says the target is out of
// reach in this run, or the machine had no CPU to spare; otherwise the
// figure against the bound.
func judge(r rule, fig float64, ok bool, c conditions) verdict {
	if !ok {
		return verdict{noVerdict, "not measured"}
	}
	switch r.Gate {
	case reference:
		return verdict{noVerdict, "a reference, not a target"}
	case reachable:
		if !c.CeilingOK {
			return verdict{noVerdict, fmt.Sprintf("%s / %s not measured in this run", cellText(r.Ceiling[0]), cellText(r.Ceiling[1]))}
		}
		if c.Ceiling < r.Need {
			return verdict{noVerdict, fmt.Sprintf("out of reach: %s / %s made %.1f× here", cellText(r.Ceiling[0]), cellText(r.Ceiling[1]), c.Ceiling)}
		}
	case spareCPU:
		if c.BusyA <= 0 || c.BusyB <= 0 {
			return verdict{noVerdict, "busy cores not measured"}
		}
		if limit := busyLimit * float64(c.CPUs); max(c.BusyA, c.BusyB) >= limit {
			return verdict{noVerdict, fmt.Sprintf("machine-bound: %.2f of %d cores busy (judged below %.1f)", max(c.BusyA, c.BusyB), c.CPUs, limit)}
		}
	case cleanB:
		if !c.RanOutBOK {
			return verdict{noVerdict, cellText(r.B) + " not measured"}
		}
		if c.RanOutB > 0 {
			return verdict{noVerdict, fmt.Sprintf("%d of %s's waits ran out too", c.RanOutB, cellText(r.B))}
		}
	}
	within := fig >= r.Need
	if r.Metric.atMost() {
		within = fig <= r.Need
	}
	if !within {
		return verdict{Outcome: notMet}
	}
	return verdict{Outcome: met}
}

// reading is a rule's figures in this run and its verdict.
type reading struct {
	rule
	Pair *pairTarget
	// Paired is the figure of the pair's rounds, PairedOK whether there is
	// one; Rounds the rounds' own figures, formatted.
	Paired   float64
	PairedOK bool
	Rounds   []string
	Matrix   float64
	MatrixOK bool
	Cond     conditions
	Verdict  verdict
}

// figure is the deciding figure: the paired one where there is one.
func (r reading) figure() (float64, bool) {
	if r.PairedOK {
		return r.Paired, true
	}
	return r.Matrix, r.MatrixOK
}

// readRules reads every rule from the rows and pairs of this run.
func readRules(rules []rule, rp report, pairs []*pairTarget) []reading {
	out := make([]reading, 0, len(rules))
	for _, r := range rules {
		out = append(out, readRule(r, rp, findPair(pairs, r.A, r.B)))
	}
	return out
}

func findPair(pairs []*pairTarget, a, b bench.Cell) *pairTarget {
	for _, t := range pairs {
		if t.A == a && t.B == b {
			return t
		}
	}
	return nil
}

func readRule(r rule, rp report, t *pairTarget) reading {
	rd := reading{rule: r, Pair: t, Cond: conditions{CPUs: runtime.NumCPU()}}
	if t != nil && t.Err == nil {
		var vals []float64
		as, bs := t.side(r.A), t.side(r.B)
		switch r.Metric {
		case batchRatio:
			vals = t.Ratios
			rd.Paired, rd.PairedOK = t.median()
		default:
			for i, a := range as {
				if v, ok := metricOf(r.Metric, a, at(bs, i)); ok {
					vals = append(vals, v)
				}
			}
			if len(vals) > 0 {
				rd.PairedOK = true
				rd.Paired = medianOf(vals)
				switch r.Metric {
				case longestWait:
					rd.Paired = slices.Max(vals)
				case ranOut:
					rd.Paired = sum(vals)
				}
			}
		}
		if n, ok := ranOutOf(bs); ok {
			rd.Cond.RanOutB, rd.Cond.RanOutBOK = n, true
		}
		for _, v := range vals {
			rd.Rounds = append(rd.Rounds, r.Metric.format(v))
		}
		rd.Cond.BusyA, rd.Cond.BusyB = medianBusy(as), medianBusy(bs)
	}
	a, okA := find(rp.rows, r.A)
	b, okB := find(rp.rows, r.B)
	if okA {
		rd.Matrix, rd.MatrixOK = metricOf(r.Metric, a, rowPtr(b, okB))
		if !rd.PairedOK {
			rd.Cond.BusyA = a.MachineBusy
			if okB {
				rd.Cond.BusyB = b.MachineBusy
				if b.Err == nil {
					rd.Cond.RanOutB, rd.Cond.RanOutBOK = b.RanOut, true
				}
			}
		}
	}
	if r.Gate == reachable {
		rd.Cond.Ceiling, rd.Cond.CeilingOK = rp.cellRatio(r.Ceiling[0], r.Ceiling[1])
	}
	fig, ok := rd.figure()
	rd.Verdict = judge(r, fig, ok, rd.Cond)
	return rd
}

func sum(v []float64) float64 {
	var t float64
	for _, x := range v {
		t += x
	}
	return t
}

// ranOutOf is how many waits ran out in rows, summed; ok is false when
// none measured without an error.
func ranOutOf(rows []row) (int, bool) {
	n, ok := 0, false
	for _, r := range rows {
		if r.Err == nil {
			n, ok = n+r.RanOut, true
		}
	}
	return n, ok
}

func at(rows []row, i int) *row {
	if i < len(rows) {
		return &rows[i]
	}
	return nil
}

func rowPtr(r row, ok bool) *row {
	if ok {
		return &r
	}
	return nil
}

// metricOf is a metric of one measurement of A, and of B where the metric
// compares with it (b may be nil otherwise).
func metricOf(m metric, a row, b *row) (float64, bool) {
	if m == ranOut {
		// A cell whose every wait ran out still has this figure.
		return float64(a.RanOut), a.Err == nil
	}
	if a.Err != nil || a.Batches == 0 {
		return 0, false
	}
	switch m {
	case batchRatio:
		if b == nil || b.BatchesPerSec() == 0 {
			return 0, false
		}
		return a.BatchesPerSec() / b.BatchesPerSec(), true
	case commandsPerBatch:
		return float64(a.Server.Calls) / float64(a.Batches), a.Server.Calls > 0
	case redisCPURatio:
		if b == nil || b.Err != nil || b.Batches == 0 || b.Server.CPU <= 0 || a.Server.CPU <= 0 {
			return 0, false
		}
		return float64(a.PerBatch(a.Server.CPU)) / float64(b.PerBatch(b.Server.CPU)), true
	case waitP99:
		return float64(a.Wait.P99), true
	case longestWait:
		return float64(a.Wait.Max), true
	case waitP99Ratio:
		if b == nil || b.Err != nil || b.Batches == 0 || b.Wait.P99 <= 0 {
			return 0, false
		}
		return float64(a.Wait.P99) / float64(b.Wait.P99), true
	}
	return 0, false
}

// medianBusy is the median of the rows' busy cores (0: none measured).
func medianBusy(rows []row) float64 {
	var v []float64
	for _, r := range rows {
		if r.Err == nil && r.MachineBusy > 0 {
			v = append(v, r.MachineBusy)
		}
	}
	if len(v) == 0 {
		return 0
	}
	return medianOf(v)
}

func (m metric) format(v float64) string {
	switch m {
	case batchRatio, redisCPURatio, waitP99Ratio:
		return ratioText(v) + "×"
	case commandsPerBatch:
		return fmt.Sprintf("%.1f", v)
	case ranOut:
		return fmt.Sprintf("%.0f", v)
	}
	return ms(time.Duration(v))
}

// required is the bound of a rule as the table prints it.
func (r rule) required() string {
	if r.Gate == reference {
		return "–"
	}
	return r.Metric.bound(r.Need)
}

// bound is a target of this metric, need, as the report prints it.
func (m metric) bound(need float64) string {
	op := "≥"
	if m.atMost() {
		op = "≤"
	}
	switch m {
	case waitP99, longestWait:
		return op + " " + m.format(need)
	case commandsPerBatch, ranOut:
		return fmt.Sprintf("%s %g", op, need)
	}
	return fmt.Sprintf("%s %g×", op, need)
}

// compared says which ceiling or reference a rule's figure is compared
// with.
func (r rule) compared() string {
	switch r.Metric {
	case batchRatio:
		switch {
		case r.B.Contender == bench.CheckedPipeline:
			return "the checked pipeline: the owner-checked ceiling"
		case r.Gate == reachable:
			return cellText(r.B) + "; ceiling: " + cellText(r.Ceiling[0])
		}
		return cellText(r.B) + " at the same round trip"
	case redisCPURatio:
		return cellText(r.B) + "'s Redis CPU per batch, same round trip"
	case waitP99Ratio:
		return cellText(r.B) + "'s wait p99, same round trip"
	case ranOut:
		switch {
		case r.Gate == cleanB:
			return "an absolute bound, judged where " + cellText(r.B) + " had none run out"
		case r.A == r.B:
			return "a figure shown, no target"
		}
	}
	return "an absolute bound; " + cellText(r.B) + " beside it"
}

// beside is what a reading shows next to its figure, no verdict: the
// ratios the rule names, the ceiling, the machine's busy cores for a
// contended ratio, B's own figure for an absolute bound.
func (rd reading) beside(rp report, pairs []*pairTarget) string {
	var parts []string
	for _, c := range rd.Beside {
		if t := findPair(pairs, c[0], c[1]); t != nil && t.Err == nil {
			if m, ok := t.median(); ok {
				parts = append(parts, fmt.Sprintf("%s / %s %s× (paired)", cellText(c[0]), cellText(c[1]), ratioText(m)))
				continue
			}
		}
		if x, ok := rp.cellRatio(c[0], c[1]); ok {
			parts = append(parts, fmt.Sprintf("%s / %s %s× (matrix)", cellText(c[0]), cellText(c[1]), ratioText(x)))
		}
	}
	if rd.Gate == reachable && rd.Cond.CeilingOK {
		parts = append(parts, fmt.Sprintf("%s / %s %.1f× (matrix)", cellText(rd.Ceiling[0]), cellText(rd.Ceiling[1]), rd.Cond.Ceiling))
	}
	switch rd.Metric {
	case ranOut:
		if rd.Cond.RanOutBOK && rd.A != rd.B {
			parts = append(parts, fmt.Sprintf("%s: %d", cellText(rd.B), rd.Cond.RanOutB))
		}
		if rd.Pair != nil && rd.Pair.Err == nil {
			if as := rd.Pair.side(rd.A); len(as) > 0 {
				parts = append(parts, fmt.Sprintf("%s %s batches/s, wait p99 %s (paired median)", cellText(rd.A), num(medianOf(batchesPerSec(as))), ms(medianOf(waitP99s(as)))))
			}
		} else if a, ok := find(rp.rows, rd.A); ok && a.Err == nil {
			parts = append(parts, fmt.Sprintf("%s batches/s, wait p99 %s, longest %s (matrix)", num(a.BatchesPerSec()), ms(a.Wait.P99), ms(a.Wait.Max)))
		}
	case waitP99Ratio:
		if rd.Pair != nil && rd.Pair.Err == nil {
			as, bs := rd.Pair.side(rd.A), rd.Pair.side(rd.B)
			if len(as) > 0 && len(bs) > 0 {
				parts = append(parts, fmt.Sprintf("wait p99 %s against %s (paired medians)", ms(medianOf(waitP99s(as))), ms(medianOf(waitP99s(bs)))))
			}
		}
	case commandsPerBatch, waitP99, longestWait:
		if b, ok := find(rp.rows, rd.B); ok {
			if v, ok := metricOf(rd.Metric, b, nil); ok {
				parts = append(parts, fmt.Sprintf("%s: %s (matrix)", cellText(rd.B), rd.Metric.format(v)))
			}
		}
		if f, ok := find(rp.rows, rd.Floor); ok && rd.Floor.Contender != "" && f.Err == nil {
			if v, ok := metricOf(rd.Metric, f, nil); ok {
				parts = append(parts, fmt.Sprintf("the same path with every key free (%s): %s (matrix)", cellText(rd.Floor), rd.Metric.format(v)))
			}
		}
	case redisCPURatio:
		a, okA := find(rp.rows, rd.A)
		b, okB := find(rp.rows, rd.B)
		if okA && okB {
			parts = append(parts, fmt.Sprintf("%s per batch against %s (matrix)", ms(a.PerBatch(a.Server.CPU)), ms(b.PerBatch(b.Server.CPU))))
		}
		if f, ok := find(rp.rows, rd.Floor); ok && okB && rd.Floor.Contender != "" && f.Err == nil && f.Batches > 0 && b.Server.CPU > 0 {
			fc, bc := f.PerBatch(f.Server.CPU), b.PerBatch(b.Server.CPU)
			parts = append(parts, fmt.Sprintf("the same path with every key free (%s): %s per batch, %s× (matrix)", cellText(rd.Floor), ms(fc), ratioText(float64(fc)/float64(bc))))
		}
	case batchRatio:
		if rd.A.Hot > 0 && (rd.Cond.BusyA > 0 || rd.Cond.BusyB > 0) {
			parts = append(parts, fmt.Sprintf("cores busy %.2f / %.2f of %d", rd.Cond.BusyA, rd.Cond.BusyB, rd.Cond.CPUs))
		}
	}
	if len(parts) == 0 {
		return "–"
	}
	return strings.Join(parts, "; ")
}

// ratioText prints a ratio with two decimals, one above 10.
func ratioText(x float64) string {
	if x >= 10 {
		return fmt.Sprintf("%.1f", x)
	}
	return fmt.Sprintf("%.2f", x)
}

// writeTargetTables writes the rules' readings, a table per group.
func writeTargetTables(b *strings.Builder, rp report, pairs []*pairTarget, rds []reading) {
	p := func(format string, a ...any) { fmt.Fprintf(b, format, a...) }
	var groups []string
	for _, rd := range rds {
		if !slices.Contains(groups, rd.Group) {
			groups = append(groups, rd.Group)
		}
	}
	for _, g := range groups {
		p("### %s\n\n", g)
		p("| target | compared with | required | paired: figure (rounds) | matrix | beside it, no verdict | verdict |\n|---|---|---:|---:|---:|---|---|\n")
		for _, rd := range rds {
			if rd.Group != g {
				continue
			}
			paired := "–"
			switch {
			case rd.Pair != nil && rd.Pair.Err != nil:
				paired = "FAILED"
			case rd.PairedOK:
				paired = fmt.Sprintf("**%s** (%s)", rd.Metric.format(rd.Paired), strings.Join(rd.Rounds, ", "))
			}
			matrix := "–"
			if rd.MatrixOK {
				matrix = rd.Metric.format(rd.Matrix)
			}
			p("| %s | %s | %s | %s | %s | %s | %s |\n", rd.Label, rd.compared(), rd.required(), paired, matrix, rd.beside(rp, pairs), rd.Verdict)
		}
		p("\n")
	}
}

// standing is the report's opening: two sentences, from this run's
// readings, on where slotlock stands.
func standing(rds []reading, pairs []*pairTarget) string {
	var lo, hi, cLo, cHi float64 = math.Inf(1), math.Inf(-1), math.Inf(1), math.Inf(-1)
	n, nMet, nCeil := 0, 0, 0
	for _, rd := range rds {
		if rd.Group != groupCeiling {
			continue
		}
		nCeil++
		if f, ok := rd.figure(); ok {
			n++
			lo, hi = min(lo, f), max(hi, f)
			if rd.Verdict.Outcome == met {
				nMet++
			}
		}
	}
	for _, c := range ceilingPairs() {
		if t := findPair(pairs, c.A, c.B); t != nil && t.Err == nil {
			if m, ok := t.median(); ok {
				cLo, cHi = min(cLo, m), max(cHi, m)
			}
		}
	}
	var b strings.Builder
	if n > 0 {
		fmt.Fprintf(&b, "Uncontended, slotlock made %s the batches/s of the owner-checked pipeline at %d batch sizes and round trips", rangeText(lo, hi), n)
		if n < nCeil {
			fmt.Fprintf(&b, " (%d not measured)", nCeil-n)
		}
		fmt.Fprintf(&b, ", %d of them at or above the target of %.2f×", nMet, ceilingNeed)
		if cLo <= cHi {
			fmt.Fprintf(&b, ", and that pipeline made %s the raw pipeline that checks nothing", rangeText(cLo, cHi))
		}
		b.WriteString(". ")
	} else {
		b.WriteString("Uncontended, this run measured no pair against the owner-checked ceiling. ")
	}
	// The other targets, not met counted by what they measure, each with
	// its figure furthest from the bound.
	var judged, ok, open int
	type miss struct {
		n     int
		worst float64
		need  float64
	}
	missed := map[metric]*miss{}
	for _, rd := range rds {
		if rd.Group == groupCeiling || rd.Gate == reference {
			continue
		}
		switch rd.Verdict.Outcome {
		case met:
			judged++
			ok++
		case notMet:
			judged++
			f, _ := rd.figure()
			m := missed[rd.Metric]
			if m == nil {
				m = &miss{worst: f, need: rd.Need}
				missed[rd.Metric] = m
			}
			m.n++
			if rd.Metric.atMost() == (f > m.worst) {
				m.worst, m.need = f, rd.Need
			}
		default:
			open++
		}
	}
	fmt.Fprintf(&b, "Of the other targets, %d of the %d this run could judge are met", ok, judged)
	var parts []string
	for _, m := range []metric{batchRatio, commandsPerBatch, redisCPURatio, waitP99, longestWait, waitP99Ratio, ranOut} {
		if x := missed[m]; x != nil {
			word := "up to"
			if !m.atMost() {
				word = "down to"
			}
			parts = append(parts, fmt.Sprintf("%s in %d (%s %s, against %s)", m.name(), x.n, word, m.format(x.worst), m.bound(x.need)))
		}
	}
	if len(parts) > 0 {
		fmt.Fprintf(&b, "; not met: %s", strings.Join(parts, "; "))
	}
	fmt.Fprintf(&b, "; %d have no verdict, out of reach of the ceiling or of this machine's CPU in this run (the tables below say which).", open)
	return b.String()
}

func rangeText(lo, hi float64) string {
	if fmt.Sprintf("%.2f", lo) == fmt.Sprintf("%.2f", hi) {
		return fmt.Sprintf("%.2f×", lo)
	}
	return fmt.Sprintf("%.2f–%.2f×", lo, hi)
}

// writeRetired says which targets of earlier reports are gone and why,
// with this run's figures.
func writeRetired(b *strings.Builder, rp report, pairs []*pairTarget, rds []reading) {
	p := func(format string, a ...any) { fmt.Fprintf(b, format, a...) }
	p("### Retired targets\n\n")
	var ceil []string
	for _, c := range ceilingPairs() {
		if t := findPair(pairs, c.A, c.B); t != nil && t.Err == nil {
			if m, ok := t.median(); ok {
				ceil = append(ceil, fmt.Sprintf("%.2f× (%s)", m, whereText(c.A)))
			}
		}
	}
	p("- **slotlock ≥ 0.85-0.95× the raw pipeline, uncontended** (0.90× at K = 1,000 and K = 1 on loopback, 0.85× at K = 100, 0.95× behind each round trip): above the ceiling of any owner-checked lock. ")
	if len(ceil) > 0 {
		p("The checked pipeline, which adds nothing to the raw pipeline but a release that deletes only its own keys, made against the raw pipeline in this run: %s. ", strings.Join(ceil, ", "))
	}
	p("Replaced by ≥ %.2f× the checked pipeline at every K and round trip; the raw pipeline is shown beside it.\n", ceilingNeed)
	p("- **K = 1,000 ≥ %d× sequential SET NX behind 200 µs, unconditionally**: ", seqNeed)
	if x, ok := rp.cellRatio(bench.Cell{Contender: "raw-pipeline", K: 1000, W: 1, RTT: 200 * time.Microsecond}, bench.Cell{Contender: "sequential-setnx", K: 1000, W: 1, RTT: 200 * time.Microsecond}); ok {
		p("the raw pipeline itself made %.1f× sequential SET NX there in this run. ", x)
	} else {
		p("this run did not measure the raw pipeline against sequential SET NX there (a short run leaves sequential SET NX at K = 1,000 behind a round trip out of the matrix). ")
	}
	p("The target stands at each round trip only where the raw pipeline reaches it in the same run.\n")
	p("- **16 × 1 processes ≥ %.2f× the batches/s of 1 × 16** (RTT 1 ms): 16 Go runtimes and six Redis nodes keep this machine's %d cores busy, so the ratio measures the machine", acrossRate, runtime.NumCPU())
	for _, rd := range rds {
		if rd.Gate == reference && rd.A.Procs == bench.ContendedW && rd.Cond.BusyA > 0 {
			p(" (%.2f of %d cores busy during 16 × 1 in this run)", rd.Cond.BusyA, rd.Cond.CPUs)
			break
		}
	}
	p(". Replaced by Redis commands and Redis CPU per batch, which carry over to a cluster whose Redis has cores of its own; the ratio is shown as a reference.\n\n")
}

// printTargets prints the targets' readings, one a line, as the report's
// tables have them.
func printTargets(w io.Writer, rows []row, pairs []*pairTarget) {
	rp := report{rows: rows}
	fmt.Fprintln(w, "slotbench: targets (the paired figure where there is one, else the matrix's):")
	for _, rd := range readRules(targetRules(rows), rp, pairs) {
		fig := "–"
		if f, ok := rd.figure(); ok {
			fig = rd.Metric.format(f)
		}
		fmt.Fprintf(w, "  %-72s %9s  required %-9s %s\n", rd.Label, fig, rd.required(), strings.ReplaceAll(rd.Verdict.String(), "**", ""))
	}
}

// batchesPerSec and waitP99s are the rows' figures, for medians.
func batchesPerSec(rows []row) []float64 {
	out := make([]float64, len(rows))
	for i, r := range rows {
		out[i] = r.BatchesPerSec()
	}
	return out
}

func waitP99s(rows []row) []time.Duration {
	out := make([]time.Duration, len(rows))
	for i, r := range rows {
		out[i] = r.Wait.P99
	}
	return out
}
