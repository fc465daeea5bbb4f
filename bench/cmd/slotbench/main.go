// Command slotbench runs the benchmark matrix of package bench against one
// Redis Cluster (3 masters, 3 replicas; redis-server processes unless
// SLOTLOCK_CLUSTER=docker|auto says otherwise: benchBackend) and writes
// the report: benchmarks.md, benchmarks/results.csv, benchmarks/bench.txt
// (benchstat's input format) and benchmarks/keys-per-second.svg.
//
//	cd bench && go run ./cmd/slotbench            # full run, writes ../docs
//	cd bench && go run ./cmd/slotbench -short     # CI smoke, writes out/
//
// Every cell is a testing.B benchmark run through testing.Benchmark, the
// same code that `go test -bench Lock` runs. The whole run is bounded by
// -timeout; the cluster is torn down on every exit path, including
// SIGINT and SIGTERM.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/slotlock/slotlock/bench"
)

// EnvShort turns on the short mode, as -short does.
const EnvShort = "SLOTLOCK_BENCH_SHORT"

type config struct {
	short       bool
	out         string
	benchtime   time.Duration
	hotTime     time.Duration
	timeout     time.Duration
	profileTime time.Duration
	root        string
	filter      *regexp.Regexp
	// verify is the number of untimed, read-back batches per worker
	// before each cell.
	verify int
}

func main() {
	// A worker process of a process cell: this binary, re-executed.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code, ran := bench.RunWorkerIfAsked(ctx)
	stop()
	if ran {
		os.Exit(code)
	}
	os.Exit(run())
}

func run() int {
	testing.Init()
	cfg := config{}
	short, _ := strconv.ParseBool(os.Getenv(EnvShort))
	flag.BoolVar(&cfg.short, "short", short, "CI smoke mode: short cells, output to out/ (also $"+EnvShort+"=1)")
	flag.StringVar(&cfg.out, "out", "", "directory that receives benchmarks.md and benchmarks/ (default ../docs, or out with -short or -cells)")
	flag.DurationVar(&cfg.benchtime, "benchtime", 0, "target time of one uncontended cell (default 1s, 150ms with -short)")
	flag.DurationVar(&cfg.hotTime, "hot-benchtime", 0, "target time of one contended cell (default 2s, 500ms with -short)")
	flag.DurationVar(&cfg.timeout, "timeout", 0, "bound on the whole run (default 11m30s, 150s with -short)")
	flag.DurationVar(&cfg.profileTime, "profile", 0, "length of each CPU-profiled slotlock run, K=1000, 100 and 1 (default 5s, 1s with -short)")
	flag.StringVar(&cfg.root, "root", "..", "the slotlock module, for the slot package micro-benchmarks")
	cells := flag.String("cells", "", "run only the cells whose name matches this regexp (and the target pairs both of whose cells match)")
	addrs := flag.String("addrs", "", "run against a cluster you already have (host:port,...) instead of starting one; keys go under -prefix and are deleted afterwards")
	prefix := flag.String("prefix", "slotbench:", "with -addrs: the prefix of every key written; the run refuses to start if any master holds a key under it")
	flag.Parse()
	if *addrs != "" && cfg.out == "" {
		// Someone else's cluster is not this repository's report.
		cfg.out = "out"
	}
	if *cells != "" && cfg.out == "" {
		// Part of the matrix is not a report for docs/.
		cfg.out = "out"
	}
	cfg.defaults()
	if *cells != "" {
		re, err := regexp.Compile(*cells)
		if err != nil {
			fmt.Fprintln(os.Stderr, "slotbench: -cells:", err)
			return 2
		}
		cfg.filter = re
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, cfg.timeout)
	defer cancel()

	began := time.Now()
	env, closeEnv, err := openEnv(ctx, *addrs, *prefix)
	if err != nil {
		fmt.Fprintln(os.Stderr, "slotbench:", err)
		return 1
	}
	finished := make(chan struct{})
	defer func() {
		close(finished)
		closeEnv()
	}()
	// testing.Benchmark cannot be interrupted: if a cell ignores its
	// context, tear everything down anyway, so nothing outlives the run.
	go func() {
		<-ctx.Done()
		select {
		case <-finished:
		case <-time.After(45 * time.Second):
			fmt.Fprintln(os.Stderr, "slotbench: still running 45 s after the deadline; cleaning up and exiting")
			closeEnv()
			os.Exit(3)
		}
	}()
	mach := describeMachine(ctx, env, cfg)
	fmt.Printf("slotbench: cluster up in %.1fs on %s; %s\n", time.Since(began).Seconds(), mach.Backend, mach.oneLine())
	for _, rtt := range bench.RTTs[1:] {
		w, err := env.MeasureWire(ctx, rtt, 300)
		if err != nil {
			fmt.Fprintln(os.Stderr, "slotbench: wire:", err)
			return 1
		}
		mach.Wire = append(mach.Wire, w)
		fmt.Printf("slotbench: round trip asked %s: PING p50 %s, %d-command pipeline p50 %s\n", ms(rtt), ms(w.Ping.P50), bench.WirePipeline, ms(w.Pipeline.P50))
	}
	if w, err := env.MeasureWire(ctx, 0, 300); err == nil {
		mach.Floor = w
	}

	// The matrix stops early enough to leave time for the profiles, the
	// micro-benchmarks and the report, which run on the outer context.
	deadline, _ := ctx.Deadline()
	cellCtx, cancelCells := context.WithDeadline(ctx, deadline.Add(-tailReserve(cfg)))
	defer cancelCells()
	var rows []row
	failed := 0
	incomplete := false
	matrix := bench.Matrix()
	est := newEstimator(cfg)
	if !cfg.short {
		warmUp(cellCtx, env, matrix, cfg)
	}
	for i, cell := range matrix {
		if cfg.filter != nil && !cfg.filter.MatchString(cell.Name()) || cfg.short && bench.SlowInShort(cell) {
			continue
		}
		if cellCtx.Err() != nil {
			fmt.Fprintf(os.Stderr, "slotbench: %v: skipping %s and what follows\n", context.Cause(cellCtx), cell.Name())
			failed++
			incomplete = true
			break
		}
		r := runCell(cellCtx, env, cell, cfg)
		est.observe(cell, r.Wall)
		// Other programs on the machine distort a cell; measure it again
		// if the rest of the matrix still fits, and keep the cleaner one.
		left, _ := cellCtx.Deadline()
		// (Not a process cell: its worker processes' start-up always counts
		// as other programs' CPU.)
		if r.Err == nil && cell.Procs == 0 && r.Foreign > retryAbove && time.Until(left) > est.remaining(matrix[i:], cfg.filter)*3/2 {
			fmt.Printf("[%2d/%d] %s\n        other programs used %.1f cores: measuring again\n", i+1, len(matrix), r.progress(), r.Foreign)
			again := runCell(cellCtx, env, cell, cfg)
			if again.Err == nil && again.Foreign < r.Foreign {
				r = again
			}
			r.Repeated = true
		}
		rows = append(rows, r)
		fmt.Printf("[%2d/%d] %s\n", i+1, len(matrix), r.progress())
		if mustNotFail(r) {
			failed++
		}
	}

	fmt.Printf("slotbench: matrix done at %s\n", time.Since(began).Round(time.Second))
	var pairs []*pairTarget
	if !incomplete && ctx.Err() == nil {
		// With -cells, the pairs whose two cells both match run too.
		pairs = slices.DeleteFunc(targetPairs(rows), func(t *pairTarget) bool {
			return cfg.filter != nil && !(cfg.filter.MatchString(t.A.Name()) && cfg.filter.MatchString(t.B.Name()))
		})
		for _, t := range pairs {
			t.run(ctx, env, cfg)
			fmt.Printf("slotbench: %s\n", t.progress())
			for _, r := range t.Rows {
				if mustNotFail(r) {
					failed++
				}
			}
		}
	}

	fmt.Printf("slotbench: pairs done at %s\n", time.Since(began).Round(time.Second))
	profs := map[int]*profileReport{}
	for _, k := range profiledKs {
		if cfg.profileTime <= 0 || ctx.Err() != nil || cfg.filter != nil || incomplete {
			break
		}
		prof, err := profileCell(ctx, env, cfg, k)
		if err != nil {
			fmt.Fprintln(os.Stderr, "slotbench: profile:", err)
			failed++
			continue
		}
		profs[k] = prof
	}
	micro, err := slotMicro(ctx, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "slotbench: slot micro-benchmarks:", err)
		failed++
	}
	mach.finish(began)
	if incomplete || ctx.Err() != nil {
		// A partial matrix would overwrite a complete report with holes.
		why := context.Cause(ctx)
		if why == nil {
			why = context.Cause(cellCtx)
		}
		fmt.Fprintf(os.Stderr, "slotbench: the run did not complete (%v); no report written\n", why)
		return 1
	}
	if err := writeReport(cfg, mach, rows, pairs, profs, micro); err != nil {
		fmt.Fprintln(os.Stderr, "slotbench: report:", err)
		return 1
	}
	printTargets(os.Stdout, rows, pairs)
	fmt.Printf("slotbench: %d cells in %s; report in %s\n", len(rows), time.Since(began).Round(time.Second), cfg.out)
	if failed > 0 {
		fmt.Fprintf(os.Stderr, "slotbench: %d failures\n", failed)
		return 1
	}
	return 0
}

func (c *config) defaults() {
	pick := func(d *time.Duration, full, short time.Duration) {
		if *d == 0 {
			*d = full
			if c.short {
				*d = short
			}
		}
	}
	// Trimmed when the round-trip cells came (from 1.5 s, 5 s and 8 s),
	// and the contended one again (from 3 s) when the contended and
	// process cells at 1 ms and their pairs came, so that make bench stays
	// under 12 minutes on 2 cores.
	pick(&c.benchtime, time.Second, 150*time.Millisecond)
	pick(&c.hotTime, 2*time.Second, 500*time.Millisecond)
	pick(&c.timeout, 11*time.Minute+30*time.Second, 150*time.Second)
	pick(&c.profileTime, 5*time.Second, time.Second)
	c.verify = 2
	if c.short {
		c.verify = 1
	}
	if c.out == "" {
		c.out = filepath.Join("..", "docs")
		if c.short {
			c.out = "out"
		}
	}
}

// mustNotFail says whether a cell's failure fails the run: any broken
// lock does, and any failure of slotlock. A peer that errs or stalls
// under load is a finding for the report, not a broken benchmark.
func mustNotFail(r row) bool {
	if r.Err == nil {
		return false
	}
	return errors.Is(r.Err, bench.ErrNotHeld) || strings.HasPrefix(r.Contender, "slotlock")
}

// retryAbove is the share of a core other programs may use during a cell
// before the runner measures the cell a second time.
const retryAbove = 0.3

// tailReserve is the time kept for what follows the matrix: profiles, the
// micro-benchmarks, the report.
func tailReserve(cfg config) time.Duration {
	rest := 40 * time.Second // micro-benchmarks (a build included), report
	if cfg.short {
		rest = 15 * time.Second
	}
	return pairsReserve(cfg) + time.Duration(len(profiledKs))*(cfg.profileTime*3/2+3*time.Second) + rest
}

// estimator predicts how long cells take, from the cells measured so far
// and, before any contended cell ran, from its target time.
type estimator struct {
	sum   map[bool]time.Duration
	n     map[bool]int
	prior map[bool]time.Duration
}

func newEstimator(cfg config) *estimator {
	return &estimator{
		sum: map[bool]time.Duration{}, n: map[bool]int{},
		// Observed on 2 cores: a cell takes about twice its target time
		// (testing.B's growing rounds, the read-back pass, setup); a
		// contended one up to three times.
		prior: map[bool]time.Duration{false: 2*cfg.benchtime + time.Second, true: 3*cfg.hotTime + time.Second},
	}
}

func (e *estimator) observe(c bench.Cell, took time.Duration) {
	e.sum[c.Hot > 0] += took
	e.n[c.Hot > 0]++
}

func (e *estimator) of(c bench.Cell) time.Duration {
	hot := c.Hot > 0
	if e.n[hot] == 0 {
		return e.prior[hot]
	}
	return e.sum[hot] / time.Duration(e.n[hot])
}

// remaining is the predicted time of cells, the first of which is the one
// that may be measured again.
func (e *estimator) remaining(cells []bench.Cell, filter *regexp.Regexp) time.Duration {
	var d time.Duration
	for _, c := range cells {
		if filter == nil || filter.MatchString(c.Name()) {
			d += e.of(c)
		}
	}
	return d
}

// row is one measured cell.
type row struct {
	bench.Result
	AllocsPerBatch int64
	BytesPerBatch  int64
	// Foreign is CPU that neither this process nor the Redis nodes used
	// during the cell, in cores: other programs on the machine, which make
	// the cell's numbers less trustworthy.
	Foreign float64
	Wall    time.Duration
	// Repeated says the cell was measured twice because other programs
	// were busy during the first measurement.
	Repeated bool
}

// warmUp runs the first cell of the matrix once, unrecorded. The first
// cell measured right after the cluster started was slower than the same
// configuration measured later: at 9412ece slotlock at K = 1, W = 1 had
// 168 µs of Redis CPU per batch, slotlock-multi and slotlock-perslot, the
// same code at K = 1 and W = 1, 117 to 120 µs a few cells on.
func warmUp(ctx context.Context, env *bench.Env, matrix []bench.Cell, cfg config) {
	for _, cell := range matrix {
		if cfg.filter != nil && !cfg.filter.MatchString(cell.Name()) {
			continue
		}
		r := measure(ctx, env, cell, cfg.benchtime, cfg.verify)
		fmt.Printf("slotbench: warm-up, not recorded: %s\n", r.progress())
		return
	}
}

func runCell(ctx context.Context, env *bench.Env, cell bench.Cell, cfg config) row {
	d := cfg.benchtime
	if cell.Hot > 0 {
		d = cfg.hotTime
	}
	return measure(ctx, env, cell, d, cfg.verify)
}

// measure runs one cell for about d after verify read-back batches per
// worker, and says how much CPU other programs took meanwhile.
func measure(ctx context.Context, env *bench.Env, cell bench.Cell, d time.Duration, verify int) row {
	_ = flag.Set("test.benchtime", d.String())
	start := time.Now()
	m0, self0 := bench.MachineCPU(), bench.ProcessCPU()
	srv0, _ := env.ServerCPU(ctx)

	r := row{Result: bench.Result{Cell: cell}}
	if cell.Procs > 0 {
		r.Result = env.RunProcs(ctx, cell, d, verify, workerCommand)
		r.Wall = time.Since(start)
		srv1, _ := env.ServerCPU(ctx)
		used := (bench.ProcessCPU() - self0) + r.ClientCPU + (srv1 - srv0)
		r.Foreign = max(0, (bench.MachineCPU()-m0-used).Seconds()/r.Wall.Seconds())
		return r
	}
	run, err := env.NewRun(ctx, cell)
	if err != nil {
		r.Err = err
		return r
	}
	defer run.Close()
	// A round lasts about d; anything far longer is a stuck lock.
	run.Timeout = max(30*time.Second, 15*d)
	run.Observe = bench.Observed(cell)
	if err := run.Verify(ctx, verify); err != nil {
		r.Err = err
		return r
	}
	br := testing.Benchmark(func(b *testing.B) { run.Bench(ctx, b) })
	r.Result = run.Last
	if br.N == 0 && r.Err == nil {
		r.Err = fmt.Errorf("%s: benchmark failed", cell.Name())
	}
	r.AllocsPerBatch, r.BytesPerBatch = br.AllocsPerOp(), br.AllocedBytesPerOp()
	r.Wall = time.Since(start)
	srv1, _ := env.ServerCPU(ctx)
	used := (bench.ProcessCPU() - self0) + (srv1 - srv0)
	r.Foreign = max(0, (bench.MachineCPU()-m0-used).Seconds()/r.Wall.Seconds())
	return r
}

// workerCommand re-executes this binary as a worker process.
func workerCommand() *exec.Cmd {
	exe, err := os.Executable()
	if err != nil {
		exe = os.Args[0]
	}
	return exec.Command(exe)
}

func (r row) progress() string {
	if r.Err != nil {
		return fmt.Sprintf("%-52s FAILED: %s", r.Name(), oneLineErr(r.Err))
	}
	s := fmt.Sprintf("%-52s %9.1f batches/s %10.0f keys/s  p50 %-8s p99 %-8s",
		r.Name(), r.BatchesPerSec(), r.KeysPerSec(), ms(r.Latency.P50), ms(r.Latency.P99))
	if r.Hot > 0 {
		s += fmt.Sprintf(" wait p99 %-8s max %-8s", ms(r.Wait.P99), ms(r.Wait.Max))
	}
	s += fmt.Sprintf(" (%d batches, %.1fs)", r.Batches, r.Wall.Seconds())
	if r.Foreign > 0.2 {
		s += fmt.Sprintf(" [other programs used %.1f cores]", r.Foreign)
	}
	return s
}

// profiledKs are the batch sizes at which slotlock runs again, alone, under
// the CPU profiler: the largest, where the targets ask where time goes, the
// middle one, where slotlock is furthest from the raw ceiling, and the
// smallest, where slotlock competes with two bare commands.
var profiledKs = []int{1000, 100, 1}

// profileReport is the CPU profile of a slotlock W=1 cell with the run it
// profiled.
type profileReport struct {
	row
	Path     string
	Summary  profileSummary
	Duration time.Duration
}

// profileCell runs slotlock at K=k with one worker under the CPU profiler,
// long enough for several hundred samples.
func profileCell(ctx context.Context, env *bench.Env, cfg config, k int) (*profileReport, error) {
	cell := bench.Cell{Contender: "slotlock", K: k, W: 1}
	run, err := env.NewRun(ctx, cell)
	if err != nil {
		return nil, err
	}
	defer run.Close()
	run.Timeout = max(30*time.Second, 10*cfg.profileTime)
	if err := run.Verify(ctx, cfg.verify); err != nil {
		return nil, err
	}
	dir := filepath.Join(cfg.out, "benchmarks")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	path := filepath.Join(dir, fmt.Sprintf("slotlock-k%d.pprof", k))
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	_ = flag.Set("test.benchtime", cfg.profileTime.String())
	start := time.Now()
	if err := pprof.StartCPUProfile(f); err != nil {
		return nil, err
	}
	br := testing.Benchmark(func(b *testing.B) { run.Bench(ctx, b) })
	pprof.StopCPUProfile()
	p := &profileReport{row: row{Result: run.Last}, Path: path, Duration: time.Since(start)}
	if br.N == 0 {
		return p, fmt.Errorf("profiled run failed: %v", run.Last.Err)
	}
	p.AllocsPerBatch, p.BytesPerBatch = br.AllocsPerOp(), br.AllocedBytesPerOp()
	if err := f.Close(); err != nil {
		return p, err
	}
	p.Summary, err = summarizeProfile(path)
	fmt.Printf("slotbench: profiled %s for %.1fs: %s\n", cell.Name(), p.Duration.Seconds(), path)
	return p, err
}

func ms(d time.Duration) string {
	switch {
	case d >= 100*time.Millisecond:
		return fmt.Sprintf("%.0fms", float64(d)/1e6)
	case d >= time.Millisecond:
		return fmt.Sprintf("%.1fms", float64(d)/1e6)
	default:
		return fmt.Sprintf("%.0fµs", float64(d)/1e3)
	}
}

func orDefault(s, def string) string {
	if strings.TrimSpace(s) == "" {
		return def
	}
	return s
}
