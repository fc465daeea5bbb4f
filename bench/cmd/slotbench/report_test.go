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
