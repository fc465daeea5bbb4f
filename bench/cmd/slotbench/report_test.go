package main

import (
	"bytes"
	"encoding/csv"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/slotlock/slotlock/bench"
)

// TestCeilingSentence: the Targets section says plainly that a target
// against sequential SET NX is above this machine's ceiling when the raw
// pipeline's own ratio is below it, with the figures that show it, and
// says nothing of the kind when the ceiling is above the target.
func TestCeilingSentence(t *testing.T) {
	const rtt = 200 * time.Microsecond
	cell := func(name string, rtt time.Duration) bench.Cell {
		return bench.Cell{Contender: name, K: 1000, W: 1, RTT: rtt}
	}
	mk := func(c bench.Cell, p50 time.Duration, batches int) row {
		return row{Result: bench.Result{Cell: c, Batches: batches, Elapsed: time.Second, Latency: bench.Dist{P50: p50}}}
	}
	m := &machine{Wire: []bench.Wire{{Asked: rtt, Ping: bench.Dist{P50: 268 * time.Microsecond}}}, Floor: bench.Wire{Ping: bench.Dist{P50: 51 * time.Microsecond}}}
	for _, tc := range []struct {
		rawPerSec int
		want      bool
	}{{rawPerSec: 231, want: true}, {rawPerSec: 500, want: false}} {
		rows := []row{
			mk(cell("sequential-setnx", 0), 46*time.Millisecond, 20),
			mk(cell("raw-pipeline", 0), 3200*time.Microsecond, 290),
			mk(cell("sequential-setnx", rtt), 302*time.Millisecond, 3),
			mk(cell("raw-pipeline", rtt), 4100*time.Microsecond, tc.rawPerSec),
			mk(cell("slotlock", rtt), 4200*time.Microsecond, 228),
		}
		pair := &pairTarget{Label: "seq", A: cell("slotlock", rtt), B: cell("sequential-setnx", rtt), Need: 100, Ratios: []float64{70.45}}
		var b strings.Builder
		writeTargets(&b, report{rows: rows}, []*pairTarget{pair}, m)
		got := b.String()
		has := strings.Contains(got, "above what this machine can show")
		if has != tc.want {
			t.Fatalf("raw at %d batches/s: sentence present %v, want %v:\n%s", tc.rawPerSec, has, tc.want, got)
		}
		if !tc.want {
			continue
		}
		for _, want := range []string{"reached 77.0×", "slotlock 70.45× (paired)", "302ms", "302µs a key", "268µs through the same layer", "pipelined batch of 3.0ms", "2 × 217µs added", "leave 2.6ms", "needs 3.2ms"} {
			if !strings.Contains(got, want) {
				t.Errorf("missing %q in:\n%s", want, got)
			}
		}
	}
}

// TestOwnerCheckSentence: at K = 1 the comparison with the raw pipeline
// says how far the smallest owner-checked lock (sequential SET NX) is from
// it, and how far slotlock is from that, when the run has the cell.
func TestOwnerCheckSentence(t *testing.T) {
	mk := func(name string, batches int, scriptUsec, scriptCalls int64) row {
		return row{Result: bench.Result{Cell: bench.Cell{Contender: name, K: 1, W: 1}, Batches: batches, Elapsed: time.Second,
			Server: bench.ServerStats{ScriptUsec: scriptUsec, ScriptCalls: scriptCalls}}}
	}
	sl, raw := mk("slotlock", 9000, 80000, 9000), mk("raw-pipeline", 10000, 0, 0)
	for _, withSeq := range []bool{true, false} {
		rp := report{rows: []row{sl, raw}}
		if withSeq {
			rp.rows = append(rp.rows, mk("sequential-setnx", 9500, 45000, 9500))
		}
		var b strings.Builder
		writeVsRaw(&b, rp, sl, raw)
		got := b.String()
		if has := strings.Contains(got, "**The owner check.**"); has != withSeq {
			t.Fatalf("with the sequential SET NX cell %v: owner-check bullet present %v:\n%s", withSeq, has, got)
		}
		if withSeq && !strings.Contains(got, "It made 0.95× the raw pipeline's batches/s here (its script 4.7 µs a call), slotlock 0.95× sequential SET NX") {
			t.Errorf("wrong figures:\n%s", got)
		}
	}
}

// TestOwnerCheckTable: the reference pairs are kept out of the targets
// table and read in their own: the checked pipeline's ratio to the raw
// pipeline, slotlock's to it, and what slotlock would need against it to
// meet the target (the target over the checked pipeline's ratio).
func TestOwnerCheckTable(t *testing.T) {
	pairs := targetPairs(nil)
	set := map[string][]float64{
		"K = 100: slotlock / raw pipeline":         {0.80, 0.81, 0.79, 0.80},
		"K = 100: checked pipeline / raw pipeline": {0.88, 0.86, 0.87, 0.87},
		"K = 100: slotlock / checked pipeline":     {0.91, 0.91, 0.92, 0.90},
		// Behind a round trip, as the rounds run of 2026-11-25 measured.
		"K = 1000: slotlock / raw pipeline (RTT 200µs)":         {0.92, 0.93, 0.91, 0.92},
		"K = 1000: checked pipeline / raw pipeline (RTT 200µs)": {0.94, 0.94, 0.93, 0.95},
		"K = 1000: slotlock / checked pipeline (RTT 200µs)":     {0.98, 0.98, 0.99, 0.97},
	}
	var got []*pairTarget
	for _, p := range pairs {
		if r, ok := set[p.Label]; ok {
			p.Ratios = r
			got = append(got, p)
		}
	}
	if len(got) != len(set) {
		t.Fatalf("targetPairs has %d of the pairs %v", len(got), set)
	}
	var b strings.Builder
	writeTargets(&b, report{}, got, &machine{})
	out := b.String()
	if strings.Contains(out, "| K = 100: checked pipeline / raw pipeline | ≥") {
		t.Errorf("a reference pair is listed as a target:\n%s", out)
	}
	// 0.85 / 0.87 = 0.977.
	want := "| 100, loopback | **0.87×** (0.88, 0.86, 0.87, 0.87) | **0.91×** (0.91, 0.91, 0.92, 0.90) | 0.85× | 0.98× |"
	if !strings.Contains(out, want) {
		t.Errorf("missing %q in:\n%s", want, out)
	}
	// 0.95 / 0.94 = 1.01: out of reach of any owner-checked lock.
	want = "| 1000, 200µs | **0.94×** (0.94, 0.94, 0.93, 0.95) | **0.98×** (0.98, 0.98, 0.99, 0.97) | 0.95× | 1.01× |"
	if !strings.Contains(out, want) {
		t.Errorf("missing %q in:\n%s", want, out)
	}
}

// TestPairsRunMatrixCells: both cells of every pair that is not a
// reference are cells of the matrix, so that the Targets table can give
// each its matrix ratio beside the paired one and the two measure the same
// thing (a process pair whose 1 × 16 side ran only in pairs would have no
// matrix figure). The best-peer pairs are built from matrix rows.
func TestPairsRunMatrixCells(t *testing.T) {
	in := map[bench.Cell]bool{}
	for _, c := range bench.Matrix() {
		in[c] = true
	}
	n := 0
	for _, p := range targetPairs(nil) {
		if p.Ref {
			continue
		}
		for _, c := range []bench.Cell{p.A, p.B} {
			if !in[c] {
				t.Errorf("%s: cell %s is not in the matrix", p.Label, c.Name())
			}
		}
		if p.A.Procs > 0 || p.A.Contender == "slotlock-multi" {
			n++
			if p.Need != 0.75 || p.WaitP99 != 30*time.Millisecond || p.WaitMax != 150*time.Millisecond {
				t.Errorf("%s: issue 15's target is 0.75x with waits within 30 / 150 ms, got %.2fx, %s / %s", p.Label, p.Need, p.WaitP99, p.WaitMax)
			}
		}
	}
	if n != 4 {
		t.Errorf("%d issue 15 pairs, want 4 (one Locker per worker at 200 µs and 1 ms, 4 × 4 and 16 × 1 at 1 ms)", n)
	}
}

// TestWaitsMet: the wait bounds take the median round's p99 and the
// longest wait of any round.
func TestWaitsMet(t *testing.T) {
	a := bench.Contended("slotlock-multi", bench.FarRTT)
	b := bench.Contended("slotlock", bench.FarRTT)
	mk := func(c bench.Cell, p99, longest time.Duration) row {
		return row{Result: bench.Result{Cell: c, Wait: bench.Dist{P99: p99, Max: longest}}}
	}
	for _, tc := range []struct {
		name string
		rows []row
		want bool
	}{
		{"one round's p99 above, median within", []row{mk(a, 25*time.Millisecond, 40*time.Millisecond), mk(b, 0, 0), mk(a, 45*time.Millisecond, 60*time.Millisecond), mk(b, 0, 0), mk(a, 29*time.Millisecond, 50*time.Millisecond)}, true},
		{"median p99 above", []row{mk(a, 31*time.Millisecond, 40*time.Millisecond), mk(a, 45*time.Millisecond, 60*time.Millisecond), mk(a, 29*time.Millisecond, 50*time.Millisecond)}, false},
		{"one round's longest above", []row{mk(a, 20*time.Millisecond, 40*time.Millisecond), mk(a, 20*time.Millisecond, 151*time.Millisecond), mk(a, 20*time.Millisecond, 50*time.Millisecond)}, false},
	} {
		p := &pairTarget{A: a, B: b, WaitP99: 30 * time.Millisecond, WaitMax: 150 * time.Millisecond, Rows: tc.rows}
		met, ok := p.waitsMet()
		if !ok || met != tc.want {
			t.Errorf("%s: waitsMet = %v, %v; want %v, true", tc.name, met, ok, tc.want)
		}
	}
	if _, ok := (&pairTarget{A: a, B: b}).waitsMet(); ok {
		t.Error("a pair without bounds reports its waits as judged")
	}
}

// TestTargetVerdictCountsWaits: an issue 15 target whose ratio is met
// but whose waits are not is not met, in the paired column and in the
// matrix column alike; and a failed round's empty waits are not counted.
func TestTargetVerdictCountsWaits(t *testing.T) {
	a := bench.Contended("slotlock-multi", bench.FarRTT)
	b := bench.Contended("slotlock", bench.FarRTT)
	mk := func(c bench.Cell, batches int, p99 time.Duration) row {
		return row{Result: bench.Result{Cell: c, Batches: batches, Elapsed: time.Second, Wait: bench.Dist{P99: p99, Max: p99}}}
	}
	for _, tc := range []struct {
		name         string
		p99          time.Duration
		paired, want string
	}{
		{"waits within", 20 * time.Millisecond, "(met; waits within bounds)", "(met)"},
		{"waits above", 40 * time.Millisecond, "(**not met**; waits **over bounds**)", "(**not met**)"},
	} {
		p := &pairTarget{Label: "x", A: a, B: b, Need: xprocNeed, WaitP99: xprocWaitP99, WaitMax: xprocWaitMax,
			Ratios: []float64{0.9, 0.9, 0.9}, Rows: []row{mk(a, 900, tc.p99), mk(b, 1000, 0), mk(b, 1000, 0), mk(a, 900, tc.p99), mk(a, 900, tc.p99), mk(b, 1000, 0)}}
		var sb strings.Builder
		writeTargets(&sb, report{rows: []row{mk(a, 900, tc.p99), mk(b, 1000, 0)}}, []*pairTarget{p}, &machine{})
		var line string
		for _, l := range strings.Split(sb.String(), "\n") {
			if strings.HasPrefix(l, "| x |") && line == "" {
				line = l // the Targets row; the waits table's comes after
			}
		}
		cols := strings.Split(line, "|")
		if len(cols) < 5 || !strings.HasSuffix(strings.TrimSpace(cols[3]), tc.paired) || !strings.HasSuffix(strings.TrimSpace(cols[4]), tc.want) {
			t.Errorf("%s: want the verdicts %s (paired) and %s (matrix), got %q", tc.name, tc.paired, tc.want, line)
		}
	}
	failed := &pairTarget{A: a, B: b, WaitP99: xprocWaitP99, WaitMax: xprocWaitMax, Err: bench.ErrNotHeld,
		Rows: []row{mk(a, 900, 20*time.Millisecond), {Result: bench.Result{Cell: b, Err: bench.ErrNotHeld}}}}
	if _, ok := failed.waitsMet(); ok {
		t.Error("a failed pair's waits are judged")
	}
	p99s, _ := (&pairTarget{A: a, Rows: []row{mk(a, 900, 20*time.Millisecond), {Result: bench.Result{Cell: a, Err: bench.ErrNotHeld}}}}).waits()
	if len(p99s) != 1 {
		t.Errorf("waits counted %d rounds, want 1 (the failed one left out)", len(p99s))
	}
}

// TestPairsCSV: pairs.csv has a line per round and side, in the order run,
// and its cells (like results.csv's) say their round trip and split.
func TestPairsCSV(t *testing.T) {
	a := bench.Contended("slotlock-multi", bench.FarRTT)
	b := bench.ProcCells(bench.FarRTT)[0]
	mk := func(c bench.Cell) row { return row{Result: bench.Result{Cell: c, Batches: 100, Elapsed: time.Second}} }
	p := &pairTarget{Label: "x", A: a, B: b, Rows: []row{mk(a), mk(b), mk(b), mk(a)}}
	recs, err := csv.NewReader(bytes.NewReader(pairsCSV([]*pairTarget{p}))).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 5 {
		t.Fatalf("%d lines, want a header and 4", len(recs))
	}
	col := map[string]int{}
	for i, h := range recs[0] {
		col[h] = i
	}
	for i, want := range [][2]string{{"1", "A"}, {"1", "B"}, {"2", "B"}, {"2", "A"}} {
		r := recs[i+1]
		if r[col["pair"]] != "x" || r[col["round"]] != want[0] || r[col["side"]] != want[1] {
			t.Errorf("line %d: pair %q round %q side %q, want x %s %s", i+1, r[col["pair"]], r[col["round"]], r[col["side"]], want[0], want[1])
		}
		c := a
		if want[1] == "B" {
			c = b
		}
		if r[col["rtt_us"]] != strconv.FormatInt(c.RTT.Microseconds(), 10) || r[col["procs"]] != strconv.Itoa(c.Procs) || r[col["batches_per_s"]] != "100.0" {
			t.Errorf("line %d: rtt_us %q procs %q batches/s %q, want %s's", i+1, r[col["rtt_us"]], r[col["procs"]], r[col["batches_per_s"]], c.Name())
		}
	}
}

// TestBalancedMedian: a pair's figure takes each round with A first
// together with the next, B first, so that an order effect cancels: rounds
// that alternate 0.8 and 1.25 with the order make 1, where the median of
// the rounds (three of five at 0.8) made 0.8; a single round is its own
// figure.
func TestBalancedMedian(t *testing.T) {
	p := &pairTarget{Ratios: []float64{0.8, 1.25, 0.8, 1.25, 0.8}}
	if m, ok := p.median(); !ok || math.Abs(m-1) > 1e-9 {
		t.Errorf("median %v, %v; want 1", m, ok)
	}
	p.Ratios = []float64{0.7}
	if m, ok := p.median(); !ok || m != 0.7 {
		t.Errorf("one round: median %v, %v; want 0.7", m, ok)
	}
}
