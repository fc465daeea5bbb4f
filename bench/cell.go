package bench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// Cell is one point of the matrix.
type Cell struct {
	Contender string
	K         int // keys per batch
	W         int // workers
	// Hot > 0 makes the cell contended: every worker draws its keys from
	// the first Hot keys. Otherwise each worker draws from its own share
	// of the whole keyspace and no two workers ever want the same key.
	Hot int
	// RTT is the round trip that the contender's connections add
	// (latency.Conn); zero is plain loopback.
	RTT time.Duration
	// Procs > 0 runs the workers in that many separate processes, W/Procs
	// each, every process with its own client and contender (see
	// RunProcs).
	Procs int
	// MaxProcs > 0 starts each of those processes with GOMAXPROCS set to
	// it (0: Go's default, every CPU of the machine). See SharedMaxProcs.
	MaxProcs int
	// Kind, when set, is the kind of lease a slotlock cell's workers take
	// (KindPlain, KindMixed, ...: kinds.go), each request with a bounded
	// wait.
	Kind string
}

// Mode is "contended" or "uncontended".
func (c Cell) Mode() string {
	if c.Hot > 0 {
		return "contended"
	}
	return "uncontended"
}

// Name is the sub-benchmark name, in benchstat's key=value form. The
// round trip and the process count are added only when set, so that the
// loopback cells keep the names earlier runs have (benchstat matches by
// name).
func (c Cell) Name() string {
	s := fmt.Sprintf("mode=%s/lib=%s/K=%d/W=%d", c.Mode(), c.Contender, c.K, c.W)
	if c.RTT > 0 {
		s += "/rtt=" + RTTName(c.RTT)
	}
	if c.Procs > 0 {
		s += fmt.Sprintf("/procs=%d", c.Procs)
	}
	if c.MaxProcs > 0 {
		s += fmt.Sprintf("/gomaxprocs=%d", c.MaxProcs)
	}
	if c.Kind != "" {
		s += "/kind=" + c.Kind
	}
	return s
}

// RTTName spells a round trip for names and tables: 200us, 1ms, 0.
func RTTName(d time.Duration) string {
	switch {
	case d == 0:
		return "0"
	case d%time.Millisecond == 0:
		return fmt.Sprintf("%dms", d/time.Millisecond)
	default:
		return fmt.Sprintf("%dus", d/time.Microsecond)
	}
}

// The matrix: on loopback (RTT 0) every K of Ks at every W of Ws; behind
// each emulated round trip of RTTs, the K of Ks at one worker (trimmed to
// fit make bench in 12 minutes on 2 cores once the round trips came: no K =
// 10 and no uncontended W = 16 any more; slowFar); the contended cell at
// each round trip of HotRTTs (HotAt says for which contenders); and the
// contended cell with slotlock's workers spread over separate processes
// (ProcsSplits) at each round trip of ProcRTTs (ProcCells).
var (
	Ks   = []int{1, 100, 1000}
	Ws   = []int{1}
	RTTs = []time.Duration{0, 200 * time.Microsecond, time.Millisecond}
	// ProcsSplits are the process counts of the contended cell's 16
	// workers: 1 × 16, 4 × 4, 16 × 1.
	ProcsSplits = []int{1, 4, 16}
)

// ContendedK and ContendedW shape the contended cell; ContendedRTT is the
// round trip of its production-like variant. FarRTT is the round trip at
// which the contended cell runs a third time, with slotlock's Lockers and
// processes and the two peers that were best in every earlier run. At 200
// µs one Locker's own cell already keeps about 1.5 of this machine's two
// cores busy (client and six Redis nodes), so a split of the workers that
// costs more CPU per batch cannot keep up with it whatever the protocol; at
// 1 ms one Locker keeps less than one core busy, and a split that costs
// up to twice its CPU per batch has room to: there the ratios of one
// Locker per worker and of 4 × 4 processes say how waiters are ordered
// across Lockers. 16 × 1 keeps both cores busy at 1 ms too.
const (
	ContendedK   = 10
	ContendedW   = 16
	ContendedRTT = 200 * time.Microsecond
	FarRTT       = time.Millisecond
)

// HotRTTs are the round trips of the contended cell; ProcRTTs those of
// the process cells.
var (
	HotRTTs  = []time.Duration{0, ContendedRTT, FarRTT}
	ProcRTTs = []time.Duration{ContendedRTT, FarRTT}
)

// farPeers are the peers that run the contended cell at FarRTT: the two
// with the most batches/s in every committed run at 200 µs and on
// loopback (sequential SET NX, then rueidislock). The others take 10 s a
// cell there and were never near them; leaving them out keeps make bench
// under 12 minutes.
var farPeers = []string{"sequential-setnx", "rueidislock"}

// HotAt says whether contender name runs the contended cell at rtt.
func HotAt(name string, rtt time.Duration) bool {
	if rtt <= ContendedRTT {
		return true
	}
	return name == "slotlock" || name == "slotlock-multi" || slices.Contains(farPeers, name)
}

// Contended is the contended cell of a contender at a round trip.
func Contended(name string, rtt time.Duration) Cell {
	return Cell{Contender: name, K: ContendedK, W: ContendedW, Hot: HotKeys, RTT: rtt}
}

// ProcCells are the process cells at a round trip: each split with its
// share of the machine's CPUs (SharedMaxProcs; 1 × 16 keeps Go's
// default, which is its share). Until the cells at 1 ms came, the splits
// also ran with Go's default GOMAXPROCS at 200 µs, which only made them
// slower on this machine (the last such run, at ab1da86: 4 × 4 1,371
// batches/s with the default against 1,646 with its share, 16 × 1 705
// against 865); they were cut to keep make bench under 12 minutes.
func ProcCells(rtt time.Duration) []Cell {
	var out []Cell
	for _, p := range ProcsSplits {
		out = append(out, inProcs(Contended("slotlock", rtt), p))
	}
	return out
}

// Matrix lists every cell: uncontended by round trip, K, then W, then
// contender (so that the contenders of one K and W run close in time),
// then contended, then the process cells and the reservation floor's,
// then the kind cells of the matrix (KindCells).
func Matrix() []Cell {
	var out []Cell
	for _, rtt := range RTTs {
		for _, k := range Ks {
			for _, w := range Ws {
				for _, f := range Contenders {
					c := Cell{Contender: f.Name, K: k, W: w, RTT: rtt}
					if !slowFar(c) {
						out = append(out, c)
					}
				}
			}
		}
	}
	for _, rtt := range HotRTTs {
		for _, f := range Contenders {
			if HotAt(f.Name, rtt) {
				out = append(out, Contended(f.Name, rtt))
			}
		}
	}
	for _, rtt := range ProcRTTs {
		out = append(out, ProcCells(rtt)...)
		out = append(out, FloorCell(rtt))
	}
	return append(out, KindCells()...)
}

// The wide cell: WideW workers taking WideK keys each from WideHot hot
// keys at FarRTT, a third of the keyspace a batch, so that a release hands
// on many keys at once to each of several waiters. The contended cell's
// batches of ten never show what a waiter of many keys meets (a burst of
// hand-offs in one message stream).
const (
	WideK   = 100
	WideW   = 8
	WideHot = 300
)

// WideCell is the wide cell of a slotlock contender ("slotlock": one
// Locker; "slotlock-multi": one per worker) over procs processes (0: this
// one), each with its share of the machine's CPUs.
func WideCell(name string, procs int) Cell {
	return inProcs(Cell{Contender: name, K: WideK, W: WideW, Hot: WideHot, RTT: FarRTT}, procs)
}

// inProcs spreads cell c's workers over procs processes (0: this one),
// each with its share of the machine's CPUs (SharedMaxProcs; Go's
// default where that is every CPU).
func inProcs(c Cell, procs int) Cell {
	c.Procs = procs
	if m := SharedMaxProcs(procs); procs > 0 && m < runtime.NumCPU() {
		c.MaxProcs = m
	}
	return c
}

// FloorCell is the reservation floor's cell at a round trip: the
// contended cell's K and workers, each worker on keys of its own
// (ReservationFloor: what a batch that waits across processes costs
// Redis before any queue work).
func FloorCell(rtt time.Duration) Cell {
	return Cell{Contender: ReservationFloor, K: ContendedK, W: ContendedW, RTT: rtt}
}

// SharedMaxProcs is the GOMAXPROCS that gives each of procs processes its
// share of this machine's CPUs, at least one. Every Go process starts with
// GOMAXPROCS = all the machine's CPUs: instances of a service on hosts of
// their own each get that many cores, but 16 worker processes on this
// machine's 2 cores would run up to 32 busy threads on 2 cores. (Measured at
// a726ed8, 16 × 1 at RTT 200 us: 574 and 650 batches/s with GOMAXPROCS=1
// against 488 and 475 with the default; client CPU 1.4 against 2.2 ms per
// batch.)
func SharedMaxProcs(procs int) int {
	return max(1, runtime.NumCPU()/max(procs, 1))
}

// Observed says which cells run another client's GETs beside them (the
// big batches, whose script calls may stall a node for everyone).
func Observed(c Cell) bool { return c.K >= 1000 }

// slowFar reports the uncontended cells that make bench leaves out: the
// lock libraries that take keys one at a time (redsync, rueidislock,
// redislock) at K = 1,000 behind a round trip, 1,000 to 2,000 round trips
// a batch (2.4 s at 1 ms), 10 to 25 s of a 12-minute run each; their K =
// 100 cells show the same cost per key. Sequential SET NX stays: a target
// divides by it.
func slowFar(c Cell) bool {
	return c.K == 1000 && c.RTT > 0 && c.Hot == 0 && !BatchesKeys(c.Contender) && c.Contender != "sequential-setnx"
}

// SlowInShort reports the cells that short runs (go test -short, the CI
// smoke run) leave out: 16 workers with 1,000 keys each, where the
// one-key-at-a-time peers take seconds per batch, and the one-key-at-a-time
// peers at K = 1,000 behind a round trip (a second or more per batch at
// 1 ms).
func SlowInShort(c Cell) bool {
	if c.K == 1000 && c.W == 16 {
		return true
	}
	return c.K == 1000 && c.RTT > 0 && !BatchesKeys(c.Contender)
}

// BatchesKeys says whether a contender sends a batch's keys together
// (slotlock and the raw pipeline) rather than one at a time.
func BatchesKeys(name string) bool {
	return name == "raw-pipeline" || strings.HasPrefix(name, "slotlock")
}

// Dist summarises a set of durations.
type Dist struct {
	P50, P99, Max time.Duration
}

func distOf(d []time.Duration) Dist {
	if len(d) == 0 {
		return Dist{}
	}
	slices.Sort(d)
	at := func(q float64) time.Duration {
		i := int(q*float64(len(d))+0.5) - 1
		return d[min(max(i, 0), len(d)-1)]
	}
	return Dist{P50: at(0.50), P99: at(0.99), Max: d[len(d)-1]}
}

// Result is what one run of a cell measured (the last round, for a
// benchmark that testing.B ran several times).
type Result struct {
	Cell
	Batches   int
	Elapsed   time.Duration
	Latency   Dist // lock + release of one batch
	Wait      Dist // from asking for the keys to holding them all
	ClientCPU time.Duration
	Server    ServerStats
	// MachineBusy is how many cores the whole machine kept busy during
	// the timed window (MachineCPU), other programs included; 0 when it
	// could not be read.
	MachineBusy float64
	Violations  int
	// Others is the latency of another client's GETs during the timed
	// round (Run.Observe): the cell's cost to everyone else on the
	// cluster. OthersN counts them, OthersErrs the ones that failed.
	Others             Dist
	OthersN, OthersErr int
	// WireWrites counts the chunks the contender's clients wrote through
	// the delaying layer (RTT > 0 only): flushes, each one command or a
	// pipelined burst to one node.
	WireWrites int64
	// Stalls counts acquisitions the benchmark gave up and retried
	// because the contender made no progress on a free key (see
	// StallAfter).
	Stalls int64
	// RanOut counts the requests of a kind cell whose wait (KindWait) ran
	// out: not granted, not an error, and not in Batches, Latency or
	// Wait.
	RanOut int
	Err    error
}

// BatchesPerSec is the cell's throughput.
func (r Result) BatchesPerSec() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Batches) / r.Elapsed.Seconds()
}

// KeysPerSec is BatchesPerSec times K.
func (r Result) KeysPerSec() float64 { return r.BatchesPerSec() * float64(r.K) }

// PerBatch divides a total over the run's batches.
func (r Result) PerBatch(d time.Duration) time.Duration {
	if r.Batches == 0 {
		return 0
	}
	return d / time.Duration(r.Batches)
}

// Run is one cell set up: its contender, acquirers and samplers live across
// the rounds that testing.B runs with growing b.N.
type Run struct {
	env      *Env
	cell     Cell
	con      Contender
	acqs     []Acquirer
	samplers []*sampler
	// draws size the requests of a kind cell, one per worker.
	draws    []*kindDraw
	excl     *exclusion
	verified bool
	// Timeout bounds one round: a stuck lock fails the cell instead of
	// hanging the suite.
	Timeout time.Duration
	// firstWorker numbers this run's workers within a cell spread over
	// processes, so that each process draws its own keys.
	firstWorker int
	// holds, when not nil, receives every batch's holding interval, for a
	// parent process to check exclusion across processes (RunProcs).
	holds [][]Hold
	// until, when set, ends a round at that time instead of after n
	// batches.
	until time.Time
	// Observe runs another client's GETs during each timed round (see
	// observer) and reports their latency in Result.Others.
	Observe bool
	// For, when set, makes each round of Bench last that long whatever
	// b.N (a kind cell: a request may take KindWait, and testing.B's
	// growing rounds would each wait for the slowest).
	For time.Duration
	// Last is the result of the latest round.
	Last Result
}

// NewRun sets up cell on env: it empties the cluster and builds the
// contender and one acquirer and key sampler per worker.
func (e *Env) NewRun(ctx context.Context, cell Cell) (*Run, error) {
	f, ok := Lookup(cell.Contender)
	if !ok {
		return nil, fmt.Errorf("bench: no contender %q", cell.Contender)
	}
	return e.newRun(ctx, cell, f)
}

func (e *Env) newRun(ctx context.Context, cell Cell, f Factory) (*Run, error) {
	if err := e.reset(ctx); err != nil {
		return nil, err
	}
	return e.setupRun(cell, f, 0)
}

// setupRun builds the contender and the workers firstWorker ... +W-1 of
// cell, on the keyspace as it is.
func (e *Env) setupRun(cell Cell, f Factory, firstWorker int) (*Run, error) {
	e = e.WithRTT(cell.RTT)
	e.kind = cell.Kind
	if cell.Kind != "" && !IsKind(cell.Kind) {
		return nil, fmt.Errorf("bench: %s: no kind %q", cell.Name(), cell.Kind)
	}
	con, err := f.New(e, cell.W)
	if err != nil {
		return nil, fmt.Errorf("bench: %s: %w", cell.Contender, err)
	}
	r := &Run{env: e, cell: cell, con: con, Timeout: 3 * time.Minute, firstWorker: firstWorker}
	space := Keyspace
	if cell.Hot > 0 {
		space = cell.Hot
	}
	r.excl = newExclusion(space)
	names := keyNames(e.prefix)
	for w := range cell.W {
		r.acqs = append(r.acqs, con.Acquirer(w))
		seed := uint64(r.firstWorker+w)<<32 | uint64(cell.K)
		r.draws = append(r.draws, newKindDraw(seed))
		if cell.Hot > 0 {
			r.samplers = append(r.samplers, newSampler(names, seed, 0, 1, cell.Hot))
		} else {
			r.samplers = append(r.samplers, newSampler(names, seed, w, cell.W, Keyspace/cell.W))
		}
	}
	return r, nil
}

// Close tears the contender down.
func (r *Run) Close() error { return r.con.Close() }

// Verify runs batches per worker untimed, reading every lock key back
// from Redis while it is held; it also warms connections, script caches
// and slot maps before the first timed round.
func (r *Run) Verify(ctx context.Context, batches int) error {
	ctx, cancel := context.WithTimeout(ctx, r.Timeout)
	defer cancel()
	res := r.round(ctx, batches*r.cell.W, true)
	if res.Err == nil && res.Violations > 0 {
		res.Err = fmt.Errorf("%w: %d violations", ErrNotHeld, res.Violations)
	}
	if res.Err != nil {
		return fmt.Errorf("bench: %s: verify: %w", r.cell.Name(), res.Err)
	}
	r.verified = true
	return nil
}

// Bench is the testing.B body of the cell: b.N batches shared by the
// cell's workers. It reports batches/s, keys/s and latency percentiles
// (and, contended, wait percentiles) as custom metrics.
func (r *Run) Bench(ctx context.Context, b *testing.B) {
	b.ReportAllocs()
	// testing.B swallows a failed benchmark's message when it runs under
	// testing.Benchmark, so the error stays in Last for the runner.
	fatal := func(err error) {
		r.Last = Result{Cell: r.cell, Err: err}
		b.Fatal(err)
	}
	if !r.verified {
		if err := r.Verify(ctx, 2); err != nil {
			fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, r.Timeout)
	defer cancel()
	var obs *observer
	if r.Observe {
		var err error
		if obs, err = r.env.startObserver(ctx); err != nil {
			fatal(err)
		}
	}
	// After the observer's warm-up, before its timed GETs: the GETs
	// subtracted below are exactly the ones between the two snapshots.
	snap0, err := r.env.snapshot(ctx)
	if err != nil {
		fatal(err)
	}
	if obs != nil {
		obs.start()
	}
	ru0, ww0, m0, t0 := ProcessCPU(), r.env.Wire.Writes.Load(), MachineCPU(), time.Now()
	b.ResetTimer()
	n := b.N
	if r.For > 0 {
		r.until, n = time.Now().Add(r.For), int(^uint(0)>>1)
		defer func() { r.until = time.Time{} }()
	}
	res := r.round(ctx, n, false)
	b.StopTimer()
	res.ClientCPU = ProcessCPU() - ru0
	res.MachineBusy = busySince(m0, t0)
	res.WireWrites = r.env.Wire.Writes.Load() - ww0
	if obs != nil {
		res.Others, res.OthersN, res.OthersErr = obs.stop()
	}
	if snap1, err := r.env.snapshot(ctx); err != nil {
		res.Err = errors.Join(res.Err, err)
	} else {
		res.Server = snap1.since(snap0)
		// The observer's GETs are not the contender's work (their time,
		// a few µs each, stays in Usec).
		if n := int64(res.OthersN + res.OthersErr); n > 0 {
			res.Server.ByCommand["get"] -= min(n, res.Server.ByCommand["get"])
			res.Server.Calls -= min(n, res.Server.Calls)
		}
	}
	if res.Err == nil && res.Violations > 0 {
		res.Err = fmt.Errorf("%w: %d mutual exclusion violations", ErrNotHeld, res.Violations)
	}
	r.Last = res
	if res.Err != nil {
		b.Fatalf("%s: %v", r.cell.Name(), res.Err)
	}
	b.ReportMetric(res.BatchesPerSec(), "batches/s")
	b.ReportMetric(res.KeysPerSec(), "keys/s")
	b.ReportMetric(float64(res.Latency.P50.Microseconds()), "p50-us")
	b.ReportMetric(float64(res.Latency.P99.Microseconds()), "p99-us")
	if obs != nil {
		b.ReportMetric(float64(res.Others.P99.Microseconds()), "others-p99-us")
		b.ReportMetric(float64(res.Others.Max.Microseconds()), "others-max-us")
	}
	if r.cell.Hot > 0 {
		b.ReportMetric(float64(res.Wait.P99.Microseconds())/1000, "wait-p99-ms")
		b.ReportMetric(float64(res.Wait.Max.Microseconds())/1000, "wait-max-ms")
	}
}

// round runs n batches over the cell's workers.
func (r *Run) round(ctx context.Context, n int, check bool) Result {
	res, _, _ := r.roundSamples(ctx, n, check)
	return res
}

// roundSamples is round, returning the latency and wait samples too.
func (r *Run) roundSamples(ctx context.Context, n int, check bool) (Result, []time.Duration, []time.Duration) {
	var (
		next       atomic.Int64
		stop       atomic.Bool
		violations atomic.Int64
		ranOut     atomic.Int64
		late       atomic.Int64
		// window: a kind cell that runs until a time counts the grants
		// within it, over it (a request may wait KindWait past it).
		window = r.cell.Kind != "" && !r.until.IsZero()
		mu     sync.Mutex
		errs   []error
		lat    = make([][]time.Duration, r.cell.W)
		wait   = make([][]time.Duration, r.cell.W)
		wg     sync.WaitGroup
	)
	fail := func(err error) {
		mu.Lock()
		if len(errs) < 8 {
			errs = append(errs, err)
		}
		mu.Unlock()
		stop.Store(true)
	}
	stalls := func() int64 {
		if s, ok := r.con.(staller); ok {
			return s.Stalls()
		}
		return 0
	}
	stalls0 := stalls()
	start := time.Now()
	for w := range r.cell.W {
		wg.Go(func() {
			for !stop.Load() && next.Add(1) <= int64(n) && (r.until.IsZero() || time.Now().Before(r.until)) {
				b := r.batch(ctx, w, check)
				violations.Add(int64(b.violations))
				if b.ranOut {
					ranOut.Add(1)
				}
				if b.err != nil {
					fail(b.err)
				}
				if b.done {
					lat[w] = append(lat[w], b.lat)
					wait[w] = append(wait[w], b.wait)
					if window && b.grantedAt.After(r.until) {
						late.Add(1)
					}
				}
				if b.stop {
					return
				}
			}
		})
	}
	wg.Wait()
	res := Result{Cell: r.cell, Elapsed: time.Since(start), Violations: int(violations.Load()), Stalls: stalls() - stalls0, RanOut: int(ranOut.Load()), Err: errors.Join(errs...)}
	if res.Err != nil && res.Stalls > 0 {
		res.Err = fmt.Errorf("%w (after %d stalled acquisitions, each abandoned after %v)", res.Err, res.Stalls, StallAfter)
	}
	allLat, allWaits := slices.Concat(lat...), slices.Concat(wait...)
	res.Latency = distOf(allLat)
	res.Batches = len(allWaits) - int(late.Load())
	res.Wait = distOf(allWaits)
	if window && r.until.After(start) {
		res.Elapsed = r.until.Sub(start)
	}
	return res, allLat, allWaits
}

// batchResult is one batch of one worker: its latency (lock + release)
// and wait (lock), whether it completed, the mutual exclusion violations
// it saw, and an error; stop ends the worker.
type batchResult struct {
	lat, wait  time.Duration
	done, stop bool
	// ranOut: a kind cell's request whose wait ran out (not done).
	ranOut bool
	// grantedAt is when Lock returned.
	grantedAt  time.Time
	violations int
	err        error
}

// batch runs one batch of worker w: draw keys, lock, claim them in the
// exclusion checker (and, with check, read them back from Redis),
// release.
func (r *Run) batch(ctx context.Context, w int, check bool) batchResult {
	if r.cell.Kind != "" {
		return r.kindBatch(ctx, w, check)
	}
	var res batchResult
	acq, s := r.acqs[w], r.samplers[w]
	keys, idx := s.next(r.cell.K)
	t0 := time.Now()
	h, err := acq.Lock(ctx, keys)
	t1 := time.Now()
	var t1mono int64
	if r.holds != nil {
		t1mono = monotonic()
	}
	if err != nil {
		res.err, res.stop = fmt.Errorf("worker %d: lock: %w", w, err), true
		return res
	}
	res.violations += r.excl.claim(idx, w)
	return r.holdAndRelease(ctx, w, check, h, res, t0, t1,
		func() { r.excl.unclaim(idx, w) },
		func() Hold { return newHold(r.firstWorker+w, t1mono, idx) })
}

// holdAndRelease is the end of every batch once its keys were granted and
// claimed: with check, read them back from Redis; unclaim them; record
// the batch's Hold when holds are kept (made only then: no allocation in a
// timed cell that keeps none); release, and time the batch from t0 (lock
// called) and t1 (granted).
func (r *Run) holdAndRelease(ctx context.Context, w int, check bool, h Held, res batchResult, t0, t1 time.Time, unclaim func(), hold func() Hold) batchResult {
	if check {
		if err := h.Check(ctx); err != nil {
			res.violations++
			res.err = fmt.Errorf("worker %d: check: %w", w, err)
		}
	}
	unclaim()
	if r.holds != nil {
		r.holds[w] = append(r.holds[w], hold())
	}
	t2 := time.Now()
	err := h.Release(ctx)
	t3 := time.Now()
	if errors.Is(err, ErrNotHeld) {
		res.violations++
	}
	if err != nil {
		res.err, res.stop = errors.Join(res.err, fmt.Errorf("worker %d: release: %w", w, err)), true
		return res
	}
	res.lat, res.wait, res.done, res.grantedAt = t1.Sub(t0)+t3.Sub(t2), t1.Sub(t0), true, t1
	return res
}

// Interleave measures two single-worker uncontended runs batch by batch,
// alternately, until d has passed: a's batch, b's, a's, ... (b's first
// with bFirst), so that whatever the machine does meanwhile (the
// scheduler placing the client and the Redis master on one core or two,
// a burst of other programs) falls on both alike. It returns a's Result
// and b's. Each counts only its own batches: Elapsed is the sum of their
// latencies, so batches/s is batches over the time spent in them. CPU and
// server figures are not taken (both sides' work is mixed). A violation
// or error ends the measurement with an error, so a Result it returns has
// none.
func Interleave(ctx context.Context, a, b *Run, d time.Duration, bFirst bool) (Result, Result, error) {
	for _, r := range []*Run{a, b} {
		if r.cell.W != 1 || r.cell.Hot > 0 || r.cell.Procs > 0 {
			return Result{}, Result{}, fmt.Errorf("bench: interleave %s: needs one worker, uncontended, in this process", r.cell.Name())
		}
	}
	runs := [2]*Run{a, b}
	if bFirst {
		runs = [2]*Run{b, a}
	}
	// Every run of a cell draws the same keys in the same order (its
	// seed is the worker and K), so that contenders meet the same keys.
	// Batch by batch that would make the second side's batch take the key
	// the first's just released, on the node the first's had just woken:
	// it came out about 8% faster at K = 1 with both sides the same
	// contender (docs/design.md, "The uncontended pairs, batch by batch").
	// So the second draws a sequence of its own, and each batch finds its
	// node as often busy or asleep whichever side it is.
	runs[1].samplers[0].reseed()
	ctx, cancel := context.WithTimeout(ctx, max(a.Timeout, b.Timeout))
	defer cancel()
	var lat [2][]time.Duration
	stop := time.Now().Add(d)
	for i := 0; time.Now().Before(stop) || len(lat[1]) < len(lat[0]); i++ {
		side := i % 2
		res := runs[side].batch(ctx, 0, false)
		if res.err == nil && res.violations > 0 {
			res.err = fmt.Errorf("%w: %d mutual exclusion violations", ErrNotHeld, res.violations)
		}
		if res.err != nil {
			return Result{}, Result{}, fmt.Errorf("bench: interleave %s: %w", runs[side].cell.Name(), res.err)
		}
		lat[side] = append(lat[side], res.lat)
	}
	var out [2]Result
	for side, r := range runs {
		var sum time.Duration
		for _, l := range lat[side] {
			sum += l
		}
		out[side] = Result{Cell: r.cell, Batches: len(lat[side]), Elapsed: sum, Latency: distOf(lat[side])}
	}
	if bFirst {
		return out[1], out[0], nil
	}
	return out[0], out[1], nil
}

// Balanced takes a pair's rounds' ratios (A's batches/s over B's) two at
// a time, one round with A first and the next with B first, and gives
// each two's geometric mean; a last round without its other order is left
// out (a single round is its own figure). Whatever the order within a
// round does to its ratio then cancels: before each side of an
// interleaved round drew keys of its own, K = 1's rounds came out 0.82,
// 0.94, 0.82, 0.93, ... as the side that started changed (docs/design.md,
// "The uncontended pairs, batch by batch").
func Balanced(ratios []float64) []float64 {
	if len(ratios) < 2 {
		return ratios
	}
	out := make([]float64, 0, len(ratios)/2)
	for i := 0; i+1 < len(ratios); i += 2 {
		out = append(out, math.Sqrt(ratios[i]*ratios[i+1]))
	}
	return out
}

// ProcessCPU is the CPU time (user+sys) this process has used: the client
// side of every contender, since the Redis nodes are other processes.
func ProcessCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// asker is an Acquirer that takes the requests of kind cells (the
// slotlock contenders): Ask waits at most KindWait, and a wait that runs
// out is slotlock.ErrNotAcquired.
type asker interface {
	Ask(ctx context.Context, ask KindAsk, owner string, name func(int) string) (Held, error)
}

// kindBatch is batch for a kind cell: one request drawn for the kind,
// through Ask; its holds claimed as the kind says (exclusion.claimAsk). A
// wait that ran out is counted, not failed.
func (r *Run) kindBatch(ctx context.Context, w int, check bool) batchResult {
	var res batchResult
	acq, ok := r.acqs[w].(asker)
	if !ok {
		res.err, res.stop = fmt.Errorf("bench: %s: contender %s takes no kind requests", r.cell.Name(), r.cell.Contender), true
		return res
	}
	s := r.samplers[w]
	ask := r.draws[w].ask(r.cell.Kind, r.cell.K, func(n int) []int {
		_, idx := s.next(n)
		return slices.Clone(idx)
	})
	owner := fmt.Sprintf("worker%d", r.firstWorker+w)
	t0 := time.Now()
	h, err := acq.Ask(ctx, ask, owner, s.names.name)
	t1 := time.Now()
	var t1mono int64
	if r.holds != nil {
		t1mono = monotonic()
	}
	if errors.Is(err, errNotAcquired) {
		res.ranOut = true
		return res
	}
	if err != nil {
		res.err, res.stop = fmt.Errorf("worker %d: acquire: %w", w, err), true
		return res
	}
	res.violations += r.excl.claimAsk(ask, w)
	return r.holdAndRelease(ctx, w, check, h, res, t0, t1,
		func() { r.excl.unclaimAsk(ask, w) },
		func() Hold { return newAskHold(r.firstWorker+w, t1mono, ask) })
}
