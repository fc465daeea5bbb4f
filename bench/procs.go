package bench

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// A contended cell with Procs > 0 runs its workers in separate OS
// processes: the bench binary re-executes itself (EnvWorker set to a
// WorkerSpec), and each process builds its own client and contender, as
// separate instances of a service would. slotlock's workers then cannot
// queue for each other in memory and meet only in Redis.
//
// Exclusion is still checked across them: each process reports the
// interval during which each batch was held, measured on CLOCK_MONOTONIC
// (one clock for every process of the machine) from the moment Lock
// returned to the moment before Release was sent, which lies inside the
// true holding time. The parent replays every interval through the same
// exclusion table as the in-process check: an overlap of two recorded
// intervals on one key is an overlap of the true ones.

// EnvWorker carries a worker process's WorkerSpec (JSON); a binary that
// finds it set runs WorkerMain instead of its usual self.
const EnvWorker = "SLOTBENCH_WORKER"

// WorkerSpec is what one worker process runs.
type WorkerSpec struct {
	Seeds  []string
	Prefix string
	Cell   Cell // W is this process's worker count
	// FirstWorker numbers this process's workers in the whole cell.
	FirstWorker int
	Duration    time.Duration
	Verify      int
}

// Hold is one batch held by one worker: keys (keyspace numbers) from
// From to To (CLOCK_MONOTONIC, ns).
type Hold struct {
	W        int
	From, To int64
	Keys     []int32
}

func newHold(w int, from int64, idx []int) Hold {
	keys := make([]int32, len(idx))
	for i, k := range idx {
		keys[i] = int32(k)
	}
	return Hold{W: w, From: from, To: monotonic(), Keys: keys}
}

// monotonic reads CLOCK_MONOTONIC, which every process of the machine
// shares (Go's time.Time keeps its monotonic reading private).
func monotonic() int64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}

// workerReport is what a worker process writes back.
type workerReport struct {
	Batches    int
	Elapsed    time.Duration
	Latency    []time.Duration
	Wait       []time.Duration
	ClientCPU  time.Duration
	Violations int
	Holds      []Hold
	// MaxProcs is the worker process's GOMAXPROCS, so that the parent can
	// check that the one it asked for took effect.
	MaxProcs int
	Err      string
}

// RunWorkerIfAsked runs this process as a worker of a process cell when
// the parent asked for one (EnvWorker set): then it returns the exit code
// and true. Both binaries that start workers (slotbench and this package's
// tests) begin with it.
func RunWorkerIfAsked(ctx context.Context) (code int, ran bool) {
	js := os.Getenv(EnvWorker)
	if js == "" {
		return 0, false
	}
	var spec WorkerSpec
	if err := json.Unmarshal([]byte(js), &spec); err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		return 2, true
	}
	if err := WorkerMain(ctx, spec, os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		return 1, true
	}
	return 0, true
}

// WorkerMain runs one worker process: it connects, verifies, says "ready",
// waits for "go" on in, runs for spec.Duration and writes its report (JSON)
// to out.
func WorkerMain(ctx context.Context, spec WorkerSpec, in io.Reader, out io.Writer) error {
	e, err := connect(ctx, spec.Seeds, spec.Prefix)
	if err != nil {
		return err
	}
	defer e.Close()
	f, ok := Lookup(spec.Cell.Contender)
	if !ok {
		return fmt.Errorf("bench: no contender %q", spec.Cell.Contender)
	}
	cell := spec.Cell
	r, err := e.setupRun(cell, f, spec.FirstWorker)
	if err != nil {
		return err
	}
	defer r.Close()
	r.Timeout = max(time.Minute, 15*spec.Duration)
	if err := r.Verify(ctx, spec.Verify); err != nil {
		return err
	}
	fmt.Fprintln(out, "ready")
	line, err := bufio.NewReader(in).ReadString('\n')
	if err != nil || strings.TrimSpace(line) != "go" {
		return fmt.Errorf("bench: worker: want go, got %q (%v)", line, err)
	}
	r.holds = make([][]Hold, cell.W)
	r.until = time.Now().Add(spec.Duration)
	ctx, cancel := context.WithTimeout(ctx, r.Timeout)
	defer cancel()
	cpu0 := ProcessCPU()
	res, lat, wait := r.roundSamples(ctx, int(^uint(0)>>1), false)
	rep := workerReport{
		Batches: res.Batches, Elapsed: res.Elapsed, Latency: lat, Wait: wait,
		ClientCPU: ProcessCPU() - cpu0, Violations: res.Violations, Holds: slices.Concat(r.holds...),
		MaxProcs: runtime.GOMAXPROCS(0),
	}
	if res.Err != nil {
		rep.Err = res.Err.Error()
	}
	return json.NewEncoder(out).Encode(rep)
}

// RunProcs measures a cell with Procs > 0 for about d: it starts the
// worker processes with command (the bench binary, which must dispatch on
// EnvWorker), each verifying its keys first, starts them together, and
// merges their reports, checking exclusion across all of them.
func (e *Env) RunProcs(ctx context.Context, cell Cell, d time.Duration, verify int, command func() *exec.Cmd) Result {
	res := Result{Cell: cell}
	if cell.Procs <= 0 || cell.W%cell.Procs != 0 {
		res.Err = fmt.Errorf("bench: %s: %d workers do not split over %d processes", cell.Name(), cell.W, cell.Procs)
		return res
	}
	if err := e.reset(ctx); err != nil {
		res.Err = err
		return res
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute+3*d)
	defer cancel()
	per := cell.W / cell.Procs
	type proc struct {
		cmd   *exec.Cmd
		stdin io.WriteCloser
		out   *bufio.Reader
	}
	var procs []proc
	defer func() {
		for _, p := range procs {
			p.stdin.Close()
			_ = p.cmd.Process.Kill()
			_ = p.cmd.Wait()
		}
	}()
	for i := range cell.Procs {
		spec := WorkerSpec{Seeds: e.seeds, Prefix: e.prefix, Cell: cell, FirstWorker: i * per, Duration: d, Verify: verify}
		spec.Cell.W = per
		js, _ := json.Marshal(spec)
		cmd := command()
		cmd.Env = append(os.Environ(), EnvWorker+"="+string(js))
		if cell.MaxProcs > 0 {
			// Last in Env: it wins over a GOMAXPROCS this process got.
			cmd.Env = append(cmd.Env, "GOMAXPROCS="+strconv.Itoa(cell.MaxProcs))
		}
		cmd.Stderr = os.Stderr
		stdin, err := cmd.StdinPipe()
		if err != nil {
			res.Err = err
			return res
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			res.Err = err
			return res
		}
		if err := cmd.Start(); err != nil {
			res.Err = fmt.Errorf("bench: start worker process: %w", err)
			return res
		}
		procs = append(procs, proc{cmd: cmd, stdin: stdin, out: bufio.NewReaderSize(stdout, 1<<20)})
	}
	// Every process connected and verified before any is timed.
	if err := forEach(ctx, len(procs), func(i int) error {
		line, err := procs[i].out.ReadString('\n')
		if strings.TrimSpace(line) != "ready" {
			return fmt.Errorf("bench: worker process %d: %q (%v)", i, line, err)
		}
		return nil
	}); err != nil {
		res.Err = err
		return res
	}
	snap0, err := e.snapshot(ctx)
	if err != nil {
		res.Err = err
		return res
	}
	m0, start := MachineCPU(), time.Now()
	for _, p := range procs {
		fmt.Fprintln(p.stdin, "go")
	}
	reports := make([]workerReport, len(procs))
	err = forEach(ctx, len(procs), func(i int) error {
		if err := json.NewDecoder(procs[i].out).Decode(&reports[i]); err != nil {
			return fmt.Errorf("bench: worker process %d: report: %w", i, err)
		}
		return nil
	})
	res.Elapsed = time.Since(start)
	res.MachineBusy = busySince(m0, start)
	if err != nil {
		res.Err = err
		return res
	}
	if snap1, err := e.snapshot(ctx); err == nil {
		res.Server = snap1.since(snap0)
	}
	var lat, wait []time.Duration
	var holds []Hold
	var errs []error
	res.Elapsed = 0
	for i, r := range reports {
		res.Batches += r.Batches
		res.Elapsed = max(res.Elapsed, r.Elapsed)
		res.ClientCPU += r.ClientCPU
		res.Violations += r.Violations
		lat = append(lat, r.Latency...)
		wait = append(wait, r.Wait...)
		holds = append(holds, r.Holds...)
		if r.Err != "" {
			errs = append(errs, fmt.Errorf("worker process %d: %s", i, r.Err))
		}
		if cell.MaxProcs > 0 && r.MaxProcs != cell.MaxProcs {
			errs = append(errs, fmt.Errorf("worker process %d: GOMAXPROCS %d, asked for %d", i, r.MaxProcs, cell.MaxProcs))
		}
	}
	space := Keyspace
	if cell.Hot > 0 {
		space = cell.Hot
	}
	res.Violations += CheckHolds(holds, space)
	res.Latency, res.Wait = distOf(lat), distOf(wait)
	res.Err = errors.Join(errs...)
	if res.Err == nil && res.Violations > 0 {
		res.Err = fmt.Errorf("%w: %d mutual exclusion violations across processes", ErrNotHeld, res.Violations)
	}
	return res
}

// CheckHolds replays holding intervals in time order through an exclusion
// table and returns how many claims found a key held by another worker.
// An interval that ends when another begins does not overlap it.
func CheckHolds(holds []Hold, space int) int {
	type event struct {
		at    int64
		claim bool
		h     *Hold
	}
	events := make([]event, 0, 2*len(holds))
	for i := range holds {
		events = append(events, event{holds[i].From, true, &holds[i]}, event{holds[i].To, false, &holds[i]})
	}
	slices.SortFunc(events, func(a, b event) int {
		if c := cmp.Compare(a.at, b.at); c != 0 {
			return c
		}
		// Releases first at equal times.
		if a.claim != b.claim {
			if a.claim {
				return 1
			}
			return -1
		}
		return 0
	})
	x := newExclusion(space)
	violations := 0
	idx := make([]int, 0, 16)
	for _, ev := range events {
		idx = idx[:0]
		for _, k := range ev.h.Keys {
			idx = append(idx, int(k))
		}
		if ev.claim {
			violations += x.claim(idx, ev.h.W)
		} else {
			x.unclaim(idx, ev.h.W)
		}
	}
	return violations
}

// forEach runs fn(0..n-1) concurrently and returns the first error, or
// the context's.
func forEach(ctx context.Context, n int, fn func(i int) error) error {
	errc := make(chan error, n)
	for i := range n {
		go func() { errc <- fn(i) }()
	}
	var first error
	for range n {
		select {
		case err := <-errc:
			if first == nil {
				first = err
			}
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
	return first
}
