package main

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/slotlock/slotlock/bench"
)

// TestJudge: the verdict rules. A figure at the bound meets it; a floor
// (batches/s) and a ceiling (commands, CPU, waits) each fail on the wrong
// side; a target against sequential SET NX is judged only where the raw
// pipeline reached it in the same run; a contended batches/s ratio only
// where neither cell's machine was busy for 1.6 of its 2 cores; a
// reference and a missing figure never. Mutations that fail it: >=
// turned into > (the "at the bound" rows), atMost ignored (commands 61
// met), the reachable gate removed (47x ceiling judged), the CPU gate
// reading A's busy cores only (B at 1.70 judged) or > instead of >= (1.60
// judged).
func TestJudge(t *testing.T) {
	seq := bench.Cell{Contender: "sequential-setnx", K: 1000, W: 1, RTT: 200 * time.Microsecond}
	raw := seq
	raw.Contender = "raw-pipeline"
	ceiling := rule{Metric: batchRatio, Need: 0.97}
	seqRule := rule{Metric: batchRatio, Need: 100, Gate: reachable, Ceiling: [2]bench.Cell{raw, seq}}
	rate := rule{Metric: batchRatio, Need: 0.75, Gate: spareCPU}
	commands := rule{Metric: commandsPerBatch, Need: 60}
	cpu := rule{Metric: redisCPURatio, Need: 2}
	wait := rule{Metric: longestWait, Need: float64(100 * time.Millisecond)}
	spare := conditions{BusyA: 1.48, BusyB: 0.83, CPUs: 2}
	for _, tc := range []struct {
		name string
		r    rule
		fig  float64
		ok   bool
		c    conditions
		want outcome
		why  string
	}{
		{"ceiling met", ceiling, 0.98, true, conditions{}, met, ""},
		{"ceiling at the bound", ceiling, 0.97, true, conditions{}, met, ""},
		{"ceiling not met", ceiling, 0.96, true, conditions{}, notMet, ""},
		{"not measured", ceiling, 0, false, conditions{}, noVerdict, "not measured"},
		{"commands within", commands, 59, true, conditions{}, met, ""},
		{"commands at the bound", commands, 60, true, conditions{}, met, ""},
		{"commands over", commands, 61, true, conditions{}, notMet, ""},
		{"Redis CPU over", cpu, 3.2, true, conditions{}, notMet, ""},
		{"longest wait within", wait, float64(99 * time.Millisecond), true, conditions{}, met, ""},
		{"longest wait over", wait, float64(101 * time.Millisecond), true, conditions{}, notMet, ""},
		{"sequential, reachable, met", seqRule, 139, true, conditions{Ceiling: 155, CeilingOK: true}, met, ""},
		{"sequential, reachable, not met", seqRule, 90, true, conditions{Ceiling: 155, CeilingOK: true}, notMet, ""},
		{"sequential, out of reach", seqRule, 43, true, conditions{Ceiling: 47.1, CeilingOK: true}, noVerdict, "out of reach: raw pipeline / sequential SET NX made 47.1× here"},
		{"sequential, no ceiling", seqRule, 139, true, conditions{}, noVerdict, "raw pipeline / sequential SET NX not measured in this run"},
		{"rate with CPU to spare, met", rate, 0.80, true, spare, met, ""},
		{"rate with CPU to spare, not met", rate, 0.70, true, spare, notMet, ""},
		{"rate, A saturated", rate, 0.85, true, conditions{BusyA: 1.64, BusyB: 0.86, CPUs: 2}, noVerdict, "machine-bound: 1.64 of 2 cores busy (judged below 1.6)"},
		{"rate, B saturated", rate, 0.70, true, conditions{BusyA: 1.2, BusyB: 1.70, CPUs: 2}, noVerdict, "machine-bound: 1.70 of 2 cores busy (judged below 1.6)"},
		{"rate, at the busy limit", rate, 0.70, true, conditions{BusyA: 1.60, BusyB: 1.0, CPUs: 2}, noVerdict, "machine-bound: 1.60 of 2 cores busy (judged below 1.6)"},
		{"rate, busy not measured", rate, 0.80, true, conditions{CPUs: 2}, noVerdict, "busy cores not measured"},
		{"reference", rule{Metric: batchRatio, Need: 0.75, Gate: reference}, 0.9, true, spare, noVerdict, "a reference, not a target"},
	} {
		got := judge(tc.r, tc.fig, tc.ok, tc.c)
		if got.Outcome != tc.want || got.Why != tc.why {
			t.Errorf("%s: %v (%q), want %v (%q)", tc.name, got.Outcome, got.Why, tc.want, tc.why)
		}
	}
}

// TestReadRule: a rule reads the paired rounds where there are some and
// the matrix cells otherwise, each metric as the report says (the median
// round's commands and Redis CPU ratio, the longest wait of any round),
// and a CPU-gated rule judges the busy cores of the cells it read (the
// median of each side's rounds). Mutations that fail it: the median
// replaced by the first round (commands 50 instead of 58), the longest
// wait by the median round's, busy cores taken from the matrix when the
// pair decides (1.9 there, machine-bound).
func TestReadRule(t *testing.T) {
	a := bench.Contended("slotlock-multi", bench.FarRTT)
	b := bench.Contended("slotlock", bench.FarRTT)
	mk := func(c bench.Cell, calls int64, cpu time.Duration, longest time.Duration, busy float64) row {
		return row{Result: bench.Result{Cell: c, Batches: 100, Elapsed: time.Second, Server: bench.ServerStats{Calls: calls, CPU: cpu},
			Wait: bench.Dist{P99: longest / 2, Max: longest}, MachineBusy: busy}}
	}
	pair := &pairTarget{A: a, B: b, Ratios: []float64{0.8, 0.9, 0.8, 0.9}, Rows: []row{
		mk(a, 5000, 100*time.Millisecond, 40*time.Millisecond, 1.5), mk(b, 3300, 30*time.Millisecond, 20*time.Millisecond, 0.8),
		mk(b, 3300, 30*time.Millisecond, 20*time.Millisecond, 0.9), mk(a, 5800, 90*time.Millisecond, 120*time.Millisecond, 1.4),
		mk(a, 6000, 60*time.Millisecond, 50*time.Millisecond, 1.5), mk(b, 3300, 30*time.Millisecond, 20*time.Millisecond, 0.8),
	}}
	rp := report{rows: []row{mk(a, 12000, 110*time.Millisecond, 30*time.Millisecond, 1.9), mk(b, 3300, 31*time.Millisecond, 20*time.Millisecond, 0.85)}}
	for _, tc := range []struct {
		r              rule
		paired, matrix string
		want           outcome
	}{
		{rule{A: a, B: b, Metric: commandsPerBatch, Need: 60}, "58.0", "120.0", met},
		{rule{A: a, B: b, Metric: redisCPURatio, Need: 2}, "3.00×", "3.55×", notMet},
		{rule{A: a, B: b, Metric: longestWait, Need: float64(100 * time.Millisecond)}, "120ms", "30.0ms", notMet},
		{rule{A: a, B: b, Metric: waitP99, Need: float64(30 * time.Millisecond)}, "25.0ms", "15.0ms", met},
		{rule{A: a, B: b, Metric: batchRatio, Need: 0.75, Gate: spareCPU}, "0.85×", "1.00×", met},
	} {
		rd := readRule(tc.r, rp, pair)
		if got := tc.r.Metric.format(rd.Paired); !rd.PairedOK || got != tc.paired {
			t.Errorf("metric %d: paired %s (%v), want %s", tc.r.Metric, got, rd.PairedOK, tc.paired)
		}
		if got := tc.r.Metric.format(rd.Matrix); !rd.MatrixOK || got != tc.matrix {
			t.Errorf("metric %d: matrix %s (%v), want %s", tc.r.Metric, got, rd.MatrixOK, tc.matrix)
		}
		if rd.Verdict.Outcome != tc.want {
			t.Errorf("metric %d: verdict %v, want %v", tc.r.Metric, rd.Verdict, tc.want)
		}
	}
	// Without the pair, the matrix decides, with the matrix's busy cores.
	rd := readRule(rule{A: a, B: b, Metric: batchRatio, Need: 0.75, Gate: spareCPU}, rp, nil)
	if rd.PairedOK || rd.Verdict.Outcome != noVerdict || !strings.HasPrefix(rd.Verdict.Why, "machine-bound: 1.90") {
		t.Errorf("matrix only: paired %v, verdict %v; want the matrix's 1.90 cores, no verdict", rd.PairedOK, rd.Verdict)
	}
}

// TestTargetRules: the table of rules covers what the targets promise:
// slotlock against the checked pipeline, >= 0.97x, at every K and round
// trip of the matrix, raw and sequential SET NX beside it; every target
// against sequential SET NX gated by the raw pipeline against the same
// cell; every contended batches/s ratio gated by the machine's CPU or a
// reference; the cost of waiting across Lockers and processes bounded
// for one Locker per worker and 16 x 1 at every round trip of the process
// cells, the waits at FarRTT. Every cell a rule or pair reads is one the
// matrix runs or a probe, and no pair runs twice. Mutations that fail it:
// a K or RTT dropped from the ceiling rules, a contended ratio without
// its gate, the 16 x 1 cost rules left out at 200 µs, a pair added twice.
func TestTargetRules(t *testing.T) {
	in := map[bench.Cell]bool{}
	for _, c := range bench.Matrix() {
		in[c] = true
	}
	// Kind cells run in their pairs (permits in the matrix too).
	known := func(c bench.Cell) bool {
		wide := c.K == bench.WideK && c.W == bench.WideW && c.Hot == bench.WideHot
		return in[c] || c.Contender == bench.CheckedPipeline && c.Hot == 0 || bench.IsKind(c.Kind) || wide
	}
	rows := []row{{Result: bench.Result{Cell: bench.Contended("rueidislock", 0), Batches: 10, Elapsed: time.Second}}}
	rules := targetRules(rows)
	ceil := map[[2]int64]bool{}
	type bounded struct {
		c bench.Cell
		m metric
	}
	across := map[bounded]int{}
	for _, r := range rules {
		for _, c := range []bench.Cell{r.A, r.B} {
			if !known(c) {
				t.Errorf("%s: cell %s is neither in the matrix nor a probe", r.Label, c.Name())
			}
		}
		switch {
		case r.B.Contender == bench.CheckedPipeline:
			if r.Metric != batchRatio || r.Need != 0.97 || r.Gate != always || r.Rounds == 0 || len(r.Beside) != 3 {
				t.Errorf("%s: want a paired 0.97x ceiling target with three references beside it", r.Label)
			}
			ceil[[2]int64{int64(r.A.K), int64(r.A.RTT)}] = true
		case r.B.Contender == "sequential-setnx" && r.A.Hot == 0:
			if r.Gate != reachable || r.Ceiling != [2]bench.Cell{{Contender: "raw-pipeline", K: r.B.K, W: 1, RTT: r.B.RTT}, r.B} {
				t.Errorf("%s: a target against sequential SET NX must be gated by the raw pipeline of the same cell", r.Label)
			}
		case r.A.Hot > 0 && r.Metric == batchRatio:
			if r.Gate != spareCPU && r.Gate != reference {
				t.Errorf("%s: a contended batches/s ratio judged without the CPU gate", r.Label)
			}
		}
		if r.A.Hot > 0 && r.Metric != batchRatio {
			across[bounded{r.A, r.Metric}]++
			if r.A.K != 10 && r.A.Kind != bench.KindPermits && r.Gate != reference {
				t.Errorf("%s: K = %d, the targets are for K = 10", r.Label, r.A.K)
			}
		}
	}
	for _, rtt := range bench.RTTs {
		for _, k := range bench.Ks {
			if !ceil[[2]int64{int64(k), int64(rtt)}] {
				t.Errorf("no ceiling target at K = %d, RTT %s", k, rtt)
			}
		}
	}
	for _, rtt := range bench.ProcRTTs {
		for _, c := range []bench.Cell{bench.Contended("slotlock-multi", rtt), procCell(16, rtt)} {
			for _, m := range []metric{commandsPerBatch, redisCPURatio} {
				if across[bounded{c, m}] != 1 {
					t.Errorf("%s: metric %d bounded %d times, want once", c.Name(), m, across[bounded{c, m}])
				}
			}
		}
	}
	for _, c := range []bench.Cell{bench.Contended("slotlock-multi", bench.FarRTT), procCell(4, bench.FarRTT), procCell(16, bench.FarRTT)} {
		for _, m := range []metric{waitP99, longestWait} {
			if across[bounded{c, m}] != 1 {
				t.Errorf("%s: waits (metric %d) not bounded once", c.Name(), m)
			}
		}
	}
	// The wide cells' waits are measured, paired, in every run, across
	// Lockers and across processes.
	for _, c := range []bench.Cell{bench.WideCell("slotlock-multi", 0), bench.WideCell("slotlock", bench.KindProcs)} {
		for _, m := range []metric{commandsPerBatch, waitP99, longestWait} {
			if across[bounded{c, m}] != 1 {
				t.Errorf("%s: metric %d shown %d times, want once", c.Name(), m, across[bounded{c, m}])
			}
		}
	}
	if !slices.ContainsFunc(rules, func(r rule) bool { return r.B.Contender == "rueidislock" && r.Gate == spareCPU }) {
		t.Error("no best-peer rule from the matrix's rows")
	}
	pairs := targetPairs(rows)
	seen := map[[2]bench.Cell]bool{}
	for _, p := range pairs {
		k := [2]bench.Cell{p.A, p.B}
		if seen[k] {
			t.Errorf("pair %s runs twice", p.Label)
		}
		seen[k] = true
		if !known(p.A) || !known(p.B) || p.Rounds == 0 {
			t.Errorf("pair %s: cells unknown or no rounds", p.Label)
		}
	}
	for _, r := range rules {
		if r.Rounds > 0 && !seen[[2]bench.Cell{r.A, r.B}] {
			t.Errorf("%s: asks for paired rounds but no pair runs", r.Label)
		}
	}
}

// TestTargetsReport: the rendered section says which ceiling each figure
// is compared with, why a rule has no verdict (with the ceiling's or the
// machine's figure), what sits beside the ceiling target, and the opening
// and the retired targets are written from the run's figures. Mutations
// that fail it: beside() without the busy cores, standing() counting a
// no-verdict rule as met, writeRetired without the checked pipeline's
// figure.
func TestTargetsReport(t *testing.T) {
	rtt := 200 * time.Microsecond
	unc := func(name string, k int, rtt time.Duration) bench.Cell {
		return bench.Cell{Contender: name, K: k, W: 1, RTT: rtt}
	}
	mk := func(c bench.Cell, perSec int, busy float64) row {
		return row{Result: bench.Result{Cell: c, Batches: perSec, Elapsed: time.Second, MachineBusy: busy}}
	}
	sl, chk, raw, seq := unc("slotlock", 1000, rtt), unc(bench.CheckedPipeline, 1000, rtt), unc("raw-pipeline", 1000, rtt), unc("sequential-setnx", 1000, rtt)
	multi, one := bench.Contended("slotlock-multi", rtt), bench.Contended("slotlock", rtt)
	rows := []row{mk(sl, 230, 1), mk(raw, 240, 1), mk(seq, 5, 1), mk(multi, 1400, 1.77), mk(one, 2600, 1.49)}
	rules := []rule{
		{Group: groupCeiling, Label: ratioLabel(sl, chk), A: sl, B: chk, Metric: batchRatio, Need: ceilingNeed, Beside: [][2]bench.Cell{{chk, raw}, {sl, raw}, {sl, seq}}},
		{Group: groupSeq, Label: ratioLabel(sl, seq), A: sl, B: seq, Metric: batchRatio, Need: seqNeed, Gate: reachable, Ceiling: [2]bench.Cell{raw, seq}},
		{Group: groupContRate, Label: ratioLabel(multi, one), A: multi, B: one, Metric: batchRatio, Need: acrossRate, Gate: spareCPU},
	}
	pairs := []*pairTarget{
		{A: sl, B: chk, Ratios: []float64{0.98, 0.99}},
		{A: chk, B: raw, Ratios: []float64{0.93, 0.94}},
	}
	rp := report{rows: rows}
	rds := readRules(rules, rp, pairs)
	var b strings.Builder
	writeTargetTables(&b, rp, pairs, rds)
	got := b.String()
	for _, want := range []string{
		"| K = 1,000, RTT 200µs: slotlock / checked pipeline | the checked pipeline: the owner-checked ceiling | ≥ 0.97× | **0.98×** (0.98×, 0.99×) | – | checked pipeline / raw pipeline 0.93× (paired); slotlock / raw pipeline 0.96× (matrix); slotlock / sequential SET NX 46.0× (matrix) | met |",
		"| K = 1,000, RTT 200µs: slotlock / sequential SET NX | sequential SET NX; ceiling: raw pipeline | ≥ 100× |",
		"raw pipeline / sequential SET NX 48.0× (matrix) | no verdict: out of reach: raw pipeline / sequential SET NX made 48.0× here |",
		"| contended, RTT 200µs: one Locker per worker / one Locker | one Locker at the same round trip | ≥ 0.75× | – | 0.54× | cores busy 1.77 / 1.49 of 2 | no verdict: machine-bound: 1.77 of 2 cores busy (judged below 1.6) |",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %q in:\n%s", want, got)
		}
	}
	open := standing(rds, []*pairTarget{pairs[0], {A: unc(bench.CheckedPipeline, 1000, 0), B: unc("raw-pipeline", 1000, 0), Ratios: []float64{0.87}}})
	for _, want := range []string{"slotlock made 0.98× the batches/s of the owner-checked pipeline at 1 batch sizes and round trips, 1 of them at or above the target of 0.97×", "that pipeline made 0.87× the raw pipeline", "0 of the 0 this run could judge are met; 2 have no verdict"} {
		if !strings.Contains(open, want) {
			t.Errorf("opening: missing %q in:\n%s", want, open)
		}
	}
	b.Reset()
	writeRetired(&b, rp, []*pairTarget{{A: unc(bench.CheckedPipeline, 1000, 0), B: unc("raw-pipeline", 1000, 0), Ratios: []float64{0.87}}}, rds)
	for _, want := range []string{"made against the raw pipeline in this run: 0.87× (K = 1,000, loopback)", "the raw pipeline itself made 48.0× sequential SET NX there in this run"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("retired: missing %q in:\n%s", want, b.String())
		}
	}
}

// TestStandingNamesWhatIsNotMet: the opening's second sentence counts
// the targets not met by what they measure, each with the figure
// furthest from its bound, and leaves references out. Mutations that
// fail it: the worst figure taken as the first (120.4), references
// counted among those without a verdict.
func TestStandingNamesWhatIsNotMet(t *testing.T) {
	a := bench.Contended("slotlock-multi", bench.FarRTT)
	rd := func(m metric, fig, need float64, g gate, o outcome) reading {
		return reading{rule: rule{Group: groupAcross, A: a, Metric: m, Need: need, Gate: g}, Matrix: fig, MatrixOK: true, Verdict: verdict{Outcome: o}}
	}
	rds := []reading{
		rd(commandsPerBatch, 120.4, 60, always, notMet),
		rd(commandsPerBatch, 126.5, 60, always, notMet),
		rd(batchRatio, 0.55, 0.75, spareCPU, noVerdict),
		rd(batchRatio, 0.53, 0.75, reference, noVerdict),
		rd(waitP99, float64(24*time.Millisecond), float64(30*time.Millisecond), always, met),
	}
	got := standing(rds, nil)
	want := "Of the other targets, 1 of the 3 this run could judge are met; not met: Redis commands per batch in 2 (up to 126.5, against ≤ 60); 1 have no verdict"
	if !strings.Contains(got, want) {
		t.Errorf("missing %q in:\n%s", want, got)
	}
}

// TestKindRules: every kind of lease is measured, in one process (one
// Locker per worker) and across bench.KindProcs processes, by the targets
// the kinds have: mixed against the same requests all exclusive (>= 1.0x
// batches/s gated by spare CPU, wait p99 <= 1.2x, no wait running out
// where the all-exclusive cell has none), reentrant and per-slot against
// plain leases (>= 0.9x gated by spare CPU, no wait running out), each
// pair's two cells the same workload but for the kind; permits shown.
// Mutations that fail it: a rule of the list dropped (e.g. per-slot
// across processes), the all-exclusive side replaced by plain leases, the
// ran-out rule of mixed without its cleanB gate, 0.9 for mixed.
func TestKindRules(t *testing.T) {
	type want struct {
		a, b   string
		m      metric
		need   float64
		g      gate
		paired bool
	}
	wants := []want{
		{bench.KindMixed, bench.KindAllExcl, batchRatio, 1.0, spareCPU, true},
		{bench.KindMixed, bench.KindAllExcl, waitP99Ratio, 1.2, always, true},
		{bench.KindMixed, bench.KindAllExcl, ranOut, 0, cleanB, true},
		{bench.KindReentrant, bench.KindPlain, batchRatio, 0.9, spareCPU, true},
		{bench.KindReentrant, bench.KindPlain, ranOut, 0, always, true},
		{bench.KindPerSlot, bench.KindPlain, batchRatio, 0.9, spareCPU, true},
		{bench.KindPerSlot, bench.KindPlain, ranOut, 0, always, true},
		{bench.KindPermits, bench.KindPermits, ranOut, 0, reference, false},
	}
	rules := targetRules(nil)
	for _, procs := range []int{0, bench.KindProcs} {
		for _, w := range wants {
			a, b := bench.KindCell(w.a, bench.KindRTT, procs), bench.KindCell(w.b, bench.KindRTT, procs)
			n := 0
			for _, r := range rules {
				if r.A != a || r.B != b || r.Metric != w.m {
					continue
				}
				n++
				if r.Need != w.need || r.Gate != w.g || (r.Rounds > 0) != w.paired || r.Group != groupKinds {
					t.Errorf("%s: need %g, gate %d, rounds %d; want %g, gate %d, paired %v", r.Label, r.Need, r.Gate, r.Rounds, w.need, w.g, w.paired)
				}
				if a.Procs != b.Procs || a.RTT != b.RTT || a.W != b.W || a.Hot != b.Hot || a.Contender != b.Contender || (a.K != b.K && w.a != bench.KindMixed) {
					t.Errorf("%s: the two sides differ beyond the kind", r.Label)
				}
			}
			if n != 1 {
				t.Errorf("%s against %s (procs %d), metric %s: %d rules, want 1", w.a, w.b, procs, w.m.name(), n)
			}
		}
	}
}

// TestKindMetrics: the kinds' metrics read from their pair as the targets
// say: waits that ran out summed over every round (not the median), the
// wait p99 ratio the median round's, and a cleanB rule judged only where
// B's rounds had none run out, with the count in its reason. Mutations
// that fail it: the sum replaced by the median (1 instead of 3), the
// cleanB gate reading A's count, the ratio taken over the longest wait.
func TestKindMetrics(t *testing.T) {
	a, b := bench.KindCell(bench.KindMixed, bench.KindRTT, 0), bench.KindCell(bench.KindAllExcl, bench.KindRTT, 0)
	mk := func(c bench.Cell, ranOut int, p99 time.Duration) row {
		return row{Result: bench.Result{Cell: c, Batches: 100, Elapsed: time.Second, RanOut: ranOut, Wait: bench.Dist{P99: p99, Max: 10 * p99}}}
	}
	pair := func(bRanOut int) *pairTarget {
		return &pairTarget{A: a, B: b, Ratios: []float64{0.1, 0.2}, Rows: []row{
			mk(a, 2, 30*time.Millisecond), mk(b, 0, 10*time.Millisecond),
			mk(b, bRanOut, 20*time.Millisecond), mk(a, 1, 50*time.Millisecond),
		}}
	}
	for _, tc := range []struct {
		r       rule
		bRanOut int
		fig     string
		want    outcome
		why     string
	}{
		{rule{A: a, B: b, Metric: ranOut, Gate: cleanB}, 0, "3", notMet, ""},
		{rule{A: a, B: b, Metric: ranOut, Gate: cleanB}, 4, "3", noVerdict, "4 of the same all exclusive, one Locker per worker's waits ran out too"},
		{rule{A: a, B: b, Metric: ranOut}, 4, "3", notMet, ""},
		{rule{A: a, B: b, Metric: waitP99Ratio, Need: 1.2}, 0, "2.75×", notMet, ""},
	} {
		rd := readRule(tc.r, report{}, pair(tc.bRanOut))
		if got := tc.r.Metric.format(rd.Paired); !rd.PairedOK || got != tc.fig {
			t.Errorf("%s (B ran out %d): %s (%v), want %s", tc.r.Metric.name(), tc.bRanOut, got, rd.PairedOK, tc.fig)
		}
		if rd.Verdict.Outcome != tc.want || rd.Verdict.Why != tc.why {
			t.Errorf("%s (B ran out %d): %v (%q), want %v (%q)", tc.r.Metric.name(), tc.bRanOut, rd.Verdict.Outcome, rd.Verdict.Why, tc.want, tc.why)
		}
	}
	// A cell with no grant at all still has its count of waits that ran
	// out (and a zero batches/s ratio, not a missing one).
	none := row{Result: bench.Result{Cell: a, Elapsed: time.Second, RanOut: 16}}
	if v, ok := metricOf(ranOut, none, nil); !ok || v != 16 {
		t.Errorf("no grants: ran out %v (%v), want 16", v, ok)
	}
}
