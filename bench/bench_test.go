package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/slotlock/slotlock/internal/rediserr"
	"github.com/slotlock/slotlock/internal/redistest"
)

var cluster *redistest.Cluster

func TestMain(m *testing.M) {
	// A worker process of TestProcs: the test binary re-executed.
	if code, ran := RunWorkerIfAsked(context.Background()); ran {
		os.Exit(code)
	}
	os.Exit(redistest.Main(m, redistest.Options{}, &cluster))
}

func newEnv(tb testing.TB) *Env {
	c := redistest.Require(tb, cluster)
	env, err := NewEnv(context.Background(), c)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(env.Close)
	return env
}

// BenchmarkLock runs the whole matrix; narrow it with -bench, e.g.
// -bench 'Lock/mode=uncontended/lib=slotlock/K=1000'. Compare runs with
// benchstat; cmd/slotbench runs the same cells and writes the report.
func BenchmarkLock(b *testing.B) {
	env := newEnv(b)
	ctx := context.Background()
	for _, cell := range Matrix() {
		// Process cells are not a testing.B: slotbench runs them.
		if testing.Short() && SlowInShort(cell) || cell.Procs > 0 {
			continue
		}
		run, err := env.NewRun(ctx, cell)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(cell.Name(), func(b *testing.B) { run.Bench(ctx, b) })
		if err := run.Close(); err != nil {
			b.Error(err)
		}
	}
}

// TestContenders is the benchmark's own safety net: every contender takes
// a few batches of every size, uncontended and contended, and every lock
// key is read back from Redis while it is held.
func TestContenders(t *testing.T) {
	env := newEnv(t)
	ctx := context.Background()
	for _, f := range append(slices.Clip(Contenders), Probes...) {
		for _, cell := range []Cell{
			{Contender: f.Name, K: 1, W: 1},
			{Contender: f.Name, K: 100, W: 4},
			{Contender: f.Name, K: 10, W: 8, Hot: 30},
		} {
			if cell.Hot > 0 && f.Name == ReservationFloor {
				continue // it measures keys nobody else wants, and fails on others
			}
			t.Run(cell.Name(), func(t *testing.T) {
				run, err := env.NewRun(ctx, cell)
				if err != nil {
					t.Fatal(err)
				}
				defer run.Close()
				if err := run.Verify(ctx, 5); err != nil {
					t.Fatal(err)
				}
			})
		}
	}
}

// TestCheckedPipelineOwnerCheck: the checked pipeline's release deletes
// only the keys that still hold its token. A key that expired and was
// taken by someone else is left to them, and Release reports it.
func TestCheckedPipelineOwnerCheck(t *testing.T) {
	env := newEnv(t)
	ctx := context.Background()
	if err := env.reset(ctx); err != nil {
		t.Fatal(err)
	}
	con, err := checkedFactory.New(env, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer con.Close()
	// Keys over every master, so the release makes one call per master.
	var keys []string
	for i := range 30 {
		keys = append(keys, fmt.Sprintf("chk:%d", i))
	}
	h, err := con.Acquirer(0).Lock(ctx, keys)
	if err != nil {
		t.Fatal(err)
	}
	stolen := []string{keys[3], keys[17]}
	for _, k := range stolen {
		if err := env.probe.Do(ctx, env.probe.B().Set().Key(k).Value("someone-else").Build()).Error(); err != nil {
			t.Fatal(err)
		}
	}
	if err := h.Release(ctx); !errors.Is(err, ErrNotHeld) || !strings.Contains(err.Error(), "2 of 30") {
		t.Fatalf("Release with 2 keys taken over = %v, want ErrNotHeld naming 2 of 30", err)
	}
	for _, k := range keys {
		v, err := env.probe.Do(ctx, env.probe.B().Get().Key(k).Build()).ToString()
		switch {
		case slices.Contains(stolen, k):
			if err != nil || v != "someone-else" {
				t.Errorf("%s, taken over by someone else: %q, %v after our release; want their value", k, v, err)
			}
		case !rediserr.IsNil(err):
			t.Errorf("%s: %q, %v after release; want it deleted", k, v, err)
		}
	}
}

// TestVerifyCatchesBrokenLocks makes sure the checks can fail: a contender
// whose keys are gone by the time Lock returns (as with a rueidislock lock
// taken on a cancelled context), and one that locks nothing at all, must
// both be reported as violations.
func TestVerifyCatchesBrokenLocks(t *testing.T) {
	env := newEnv(t)
	ctx := context.Background()
	lost := Factory{Name: "lost", New: func(env *Env, w int) (Contender, error) {
		c, err := rawFactory.New(env, w)
		if err != nil {
			return nil, err
		}
		return lostContender{c.(*rawContender)}, nil
	}}
	none := Factory{Name: "none", New: func(*Env, int) (Contender, error) { return noLock{}, nil }}
	for _, tc := range []struct {
		f    Factory
		cell Cell
	}{
		{lost, Cell{Contender: "lost", K: 10, W: 1}},
		{none, Cell{Contender: "none", K: 10, W: 8, Hot: 30}},
	} {
		t.Run(tc.f.Name, func(t *testing.T) {
			run, err := env.newRun(ctx, tc.cell, tc.f)
			if err != nil {
				t.Fatal(err)
			}
			defer run.Close()
			if err := run.Verify(ctx, 20); !errors.Is(err, ErrNotHeld) {
				t.Fatalf("Verify = %v, want a violation (ErrNotHeld)", err)
			}
		})
	}
}

// lostContender locks like the raw pipeline, then loses every key before
// Lock returns.
type lostContender struct{ *rawContender }

func (c lostContender) Acquirer(int) Acquirer { return c }

func (c lostContender) Lock(ctx context.Context, keys []string) (Held, error) {
	h, err := c.rawContender.Lock(ctx, keys)
	if err != nil {
		return nil, err
	}
	if _, err := c.del(ctx, keys); err != nil {
		return nil, err
	}
	return h, nil
}

// noLock pretends: every Lock succeeds at once and every check passes, so
// only the in-process exclusion table can see two workers on one key. Its
// Check lingers so that workers overlap.
type noLock struct{}

func (noLock) Acquirer(int) Acquirer                        { return noLock{} }
func (noLock) Close() error                                 { return nil }
func (noLock) Lock(context.Context, []string) (Held, error) { return noLock{}, nil }
func (noLock) Release(context.Context) error                { return nil }
func (noLock) Check(context.Context) error                  { time.Sleep(time.Millisecond); return nil }

// TestRueidislockStallGuard checks the guard that keeps one stuck
// rueidislock call from hanging a cell: a call that makes no progress for
// StallAfter is abandoned, counted, and the batch retried until it gets in.
func TestRueidislockStallGuard(t *testing.T) {
	env := newEnv(t)
	ctx := context.Background()
	if err := env.reset(ctx); err != nil {
		t.Fatal(err)
	}
	con, err := rueidislockFactory.New(env, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer con.Close()
	c := con.(*rueidislockContender)
	holder, err := c.Lock(ctx, []string{"order:1"})
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		time.Sleep(StallAfter + StallAfter/2)
		_ = holder.Release(ctx)
	}()
	start := time.Now()
	h, err := c.Lock(ctx, []string{"order:1"})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Check(ctx); err != nil {
		t.Fatal(err)
	}
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if c.Stalls() < 1 || time.Since(start) < StallAfter {
		t.Fatalf("after %v: %d stalls, want at least 1", time.Since(start), c.Stalls())
	}
}

// TestInterleave: two single-worker cells measured batch by batch get the
// same number of batches each (the one that started never has one more
// at the end), each side's time is the sum of its own batches only (so
// the two together fit in the wall time), and a cell with more than one
// worker, or contended, is refused.
func TestInterleave(t *testing.T) {
	env := newEnv(t)
	ctx := context.Background()
	a, err := env.NewRun(ctx, Cell{Contender: "slotlock", K: 10, W: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := env.NewRun(ctx, Cell{Contender: "raw-pipeline", K: 10, W: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	start := time.Now()
	ra, rb, err := Interleave(ctx, a, b, 300*time.Millisecond, false)
	wall := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	// At least one, not a rate: how many batches fit in 300 ms is the
	// machine's load.
	if ra.Batches < 1 || ra.Batches != rb.Batches {
		t.Errorf("batches %d and %d, want equal and at least 1", ra.Batches, rb.Batches)
	}
	if ra.Elapsed <= 0 || rb.Elapsed <= 0 || ra.Elapsed+rb.Elapsed > wall {
		t.Errorf("own times %v + %v, want both > 0 and together within the wall time %v", ra.Elapsed, rb.Elapsed, wall)
	}
	if ra.Cell.Contender != "slotlock" || rb.Cell.Contender != "raw-pipeline" || ra.Latency.P50 <= 0 || rb.Latency.P50 <= 0 {
		t.Errorf("results %+v and %+v", ra, rb)
	}
	// The two cells have the same seed and drew as many batches: without
	// a sequence of b's own, their next draws would be the same keys.
	ka, _ := a.samplers[0].next(10)
	ka = slices.Clone(ka)
	if kb, _ := b.samplers[0].next(10); slices.Equal(ka, kb) {
		t.Errorf("both sides draw %v next: the second side takes the keys the first just released", ka)
	}
	hot, err := env.NewRun(ctx, Cell{Contender: "slotlock", K: 10, W: 4, Hot: 30})
	if err != nil {
		t.Fatal(err)
	}
	defer hot.Close()
	if _, _, err := Interleave(ctx, a, hot, 50*time.Millisecond, false); err == nil {
		t.Error("a contended cell of 4 workers was interleaved")
	}
}
