package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/slotlock/slotlock/bench"
)

// pairTarget is two cells that one or more target rules read (the
// batches/s ratio, or A's commands, CPU or waits against B's), measured
// apart from the matrix by running them alternately (A B, B A, A B, ...):
// on a machine shared with other programs, a burst of load then hits both
// sides instead of one, and the median of the rounds is what counts.
type pairTarget struct {
	Label string
	A, B  bench.Cell // the ratio is A's batches/s over B's
	// Rounds, when set, replaces pairRounds (targetRules says how many
	// each pair runs; even, so that every round has its other order:
	// balanced).
	Rounds int
	// D is the target time of each cell of a round.
	D time.Duration
	// Ratios has one A/B ratio per round; Rows the cells as measured.
	Ratios []float64
	Rows   []row
	Err    error
}

// pairRounds is how many times each pair alternates unless it says
// otherwise (pairTarget.Rounds). Six: with three the rounds of one pair
// ranged over 30% on this machine (K = 1: 0.82, 1.10, 0.89 at a4f4b87),
// and the median of three moved with a single burst of load; even, so
// that the figure takes every round with its other order (balanced).
func pairRounds(cfg config) int {
	if cfg.short {
		return 1
	}
	return 6
}

// pairTime is the target time of one cell of a pair.
func pairTime(cfg config, c bench.Cell) time.Duration {
	if c.Hot > 0 {
		return max(cfg.hotTime*2/5, 300*time.Millisecond)
	}
	return max(cfg.benchtime*2/3, 100*time.Millisecond)
}

// pairsReserve is the time the pairs take, kept free at the end of the
// matrix.
//
// Per cell: a contended pair cell takes about
// twice its target plus 0.5 s: measured at 23afe72 on 2 cores (the 15
// pairs, the profiles and the report took about 5 of the run's 8
// minutes). Twice the target plus a second, the estimate before, kept
// about 3 minutes too many free once the reference pairs came, and the
// matrix, cut short, skipped its separate-process cells under the
// default -timeout.
//
// An uncontended pair batch by batch takes twice the pair time a round
// and a few tens of milliseconds to build and verify both sides (58
// rounds in 78 s at 2 x 667 ms, 2026-11-28): about the pair time plus
// 50 ms per side; 100 ms is kept.
func pairsReserve(cfg config) time.Duration {
	unc := pairTime(cfg, bench.Cell{}) + 100*time.Millisecond
	hot := 2*pairTime(cfg, bench.Cell{Hot: 1}) + 500*time.Millisecond
	var d time.Duration
	for _, t := range targetPairs(nil) {
		each := unc
		if t.A.Hot > 0 {
			// A process cell also starts its processes and verifies in
			// each of them.
			each = hot
			if t.A.Procs > 0 || t.B.Procs > 0 {
				each += 500 * time.Millisecond
			}
			// A kind cell ends when its last request is granted or gives
			// up, up to bench.KindWait after its time: mixed requests'
			// waits run that long (the pairs of the other kinds took
			// about the estimate of any contended pair; 2026-11-28, 2 x 2
			// rounds of the six kind pairs in 48 s).
			if t.A.Kind == bench.KindMixed {
				each += bench.KindWait / 2
			}
		}
		d += time.Duration(t.rounds(cfg)) * 2 * each
	}
	// Sequential SET NX at K = 1,000 behind 1 ms takes about 2 s a batch,
	// one batch per cell and one to verify.
	slow := 5 * time.Second
	if cfg.short {
		slow = 0
	}
	// The best-peer pairs, one per contended round trip (targetPairs adds
	// them only once the matrix has named the peer).
	best := time.Duration(len(bench.HotRTTs)) * 2 * hot
	// Three quarters of the sum: the whole sum kept 7m48s for the pairs,
	// profiles and report, which took 4m25s (matrix cut at its budget,
	// 3m42s, the run 8m07s) and in the next run left the matrix too little
	// (cut before its process cells). At three quarters the matrix ended
	// at 4m00s, the pairs at 8m53s, the run at 9m33s.
	return (d + time.Duration(pairRounds(cfg))*(slow+best)) * 3 / 4
}

// rounds is how many times the pair alternates.
func (t *pairTarget) rounds(cfg config) int {
	if t.Rounds > 0 && !cfg.short {
		return t.Rounds
	}
	return pairRounds(cfg)
}

// k1Rounds is the rounds of the pairs at K = 1 on loopback, whose single
// cells are the noisiest of the matrix (targetRules).
const k1Rounds = 10

// targetPairs are the pairs the target rules read (targetRules), in
// the rules' order, and the ceiling's reference pairs (ceilingPairs). A
// pair that several rules read runs once, as many rounds as the most any
// of them asks.
func targetPairs(rows []row) []*pairTarget {
	var out []*pairTarget
	add := func(a, b bench.Cell, rounds int) {
		if t := findPair(out, a, b); t != nil {
			t.Rounds = max(t.Rounds, rounds)
			return
		}
		out = append(out, &pairTarget{Label: whereText(a) + ": " + cellText(a) + " / " + cellText(b), A: a, B: b, Rounds: rounds})
	}
	for _, r := range targetRules(rows) {
		if r.Rounds > 0 {
			add(r.A, r.B, r.Rounds)
		}
	}
	for _, c := range ceilingPairs() {
		add(c.A, c.B, c.Rounds)
	}
	return out
}

// oneProcess is the process cell of one process with all the workers,
// the baseline of the other splits at rtt.
func oneProcess(rtt time.Duration) bench.Cell {
	for _, c := range bench.ProcCells(rtt) {
		if c.Procs == 1 {
			return c
		}
	}
	panic("slotbench: bench.ProcsSplits has no split of one process")
}

// run measures the pair's rounds, the side that goes first alternating,
// and keeps every round's rows (in the order run) and ratio.
func (t *pairTarget) run(ctx context.Context, env *bench.Env, cfg config) {
	t.D = pairTime(cfg, t.A)
	round := t.cellsRound
	if interleaved(t.A) && interleaved(t.B) {
		round = t.interleaveRound
	}
	for i := range t.rounds(cfg) {
		ra, rb, err := round(ctx, env, i%2 == 1)
		order := []row{ra, rb}
		if i%2 == 1 {
			order = []row{rb, ra}
		}
		for _, r := range order {
			if r.Wall > 0 || r.Err != nil { // a side that did not run is left out
				t.Rows = append(t.Rows, r)
			}
		}
		if err != nil {
			t.Err = err
			return
		}
		if rb.BatchesPerSec() > 0 {
			t.Ratios = append(t.Ratios, ra.BatchesPerSec()/rb.BatchesPerSec())
		}
	}
}

// cellsRound is one round of whole cells, A's then B's (B's first with
// bFirst). A cell that fails ends the round; the one not run yet comes
// back as its cell's empty row (no Wall, no Err).
func (t *pairTarget) cellsRound(ctx context.Context, env *bench.Env, bFirst bool) (row, row, error) {
	measureTo := func(r *row) error {
		*r = measure(ctx, env, r.Cell, t.D, 1)
		return r.Err
	}
	ra, rb := row{Result: bench.Result{Cell: t.A}}, row{Result: bench.Result{Cell: t.B}}
	first, second := &ra, &rb
	if bFirst {
		first, second = &rb, &ra
	}
	if err := measureTo(first); err != nil {
		return ra, rb, err
	}
	return ra, rb, measureTo(second)
}

// interleaved reports whether a pair's cell is measured batch by batch
// against the other side (bench.Interleave): one worker, uncontended, in
// this process. Cells of their own, A then B, measured two states of the
// machine more often than two contenders: in one run's pairs.csv
// (2026-11-28) the raw pipeline at K = 1 made 5,783 and 9,967 batches/s
// in consecutive cells, and K = 100's rounds came out 0.87, 0.75, 0.92,
// 0.79, 0.89 as the order within the round changed (docs/design.md, "The
// uncontended pairs, batch by batch").
func interleaved(c bench.Cell) bool { return c.Hot == 0 && c.W == 1 && c.Procs == 0 }

// interleaveRound is one round batch by batch (bench.Interleave): both
// sides built afresh, their keys read back once (Verify), then run for
// twice the pair time (each side's share about the pair time), B's batch
// first with bFirst. A's row and B's; a failure is in A's row.
func (t *pairTarget) interleaveRound(ctx context.Context, env *bench.Env, bFirst bool) (row, row, error) {
	ra, rb := row{Result: bench.Result{Cell: t.A}}, row{Result: bench.Result{Cell: t.B}}
	start := time.Now()
	fail := func(err error) (row, row, error) {
		ra.Err, ra.Wall = err, time.Since(start)
		return ra, rb, err
	}
	a, err := env.NewRun(ctx, t.A)
	if err != nil {
		return fail(err)
	}
	defer a.Close()
	// NewRun empties the cluster; a holds nothing yet.
	b, err := env.NewRun(ctx, t.B)
	if err != nil {
		return fail(err)
	}
	defer b.Close()
	for _, r := range []*bench.Run{a, b} {
		if err := r.Verify(ctx, 1); err != nil {
			return fail(err)
		}
	}
	r1, r2, err := bench.Interleave(ctx, a, b, 2*t.D, bFirst)
	if err != nil {
		return fail(err)
	}
	ra.Result, rb.Result = r1, r2
	ra.Wall, rb.Wall = time.Since(start), time.Since(start)
	return ra, rb, nil
}

// median is the pair's figure: the middle of its balanced ratios (the
// mean of the middle two for an even count); ok is false when no round
// completed.
func (t *pairTarget) median() (float64, bool) {
	if len(t.Ratios) == 0 {
		return 0, false
	}
	return medianOf(bench.Balanced(t.Ratios)), true
}

// medianOf is the middle value of v (the mean of the middle two for an
// even count); v is not empty.
func medianOf[T float64 | time.Duration](v []T) T {
	s := slices.Sorted(slices.Values(v))
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// rows of one side, in the order measured.
func (t *pairTarget) side(c bench.Cell) []row {
	var out []row
	for _, r := range t.Rows {
		if r.Cell == c {
			out = append(out, r)
		}
	}
	return out
}

func (t *pairTarget) ratios() string {
	parts := make([]string, len(t.Ratios))
	for i, r := range t.Ratios {
		parts[i] = fmt.Sprintf("%.2f", r)
	}
	return strings.Join(parts, ", ")
}

func (t *pairTarget) progress() string {
	if t.Err != nil {
		return fmt.Sprintf("target %s: FAILED: %v", t.Label, t.Err)
	}
	m, _ := t.median()
	return fmt.Sprintf("pair %s: %.2f× (balanced median) of rounds %s", t.Label, m, t.ratios())
}
