package bench

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"testing"
	"time"
)

// TestKinds runs every kind of lease (Cell.Kind) on the harness's cluster,
// contended, with one Locker per worker in this process and over two
// worker processes (this test binary, re-executed): each reads its
// exclusive keys back (Verify), claims its shared keys and permits in the
// exclusion witness, and the parent replays every process's holds
// (CheckHolds). Fails if a kind's requests do not reach Acquire as
// asked (checkAsked reads a shared key back as held shared: sending the
// shared keys as exclusive fails it, checked), if a kind errs, or if
// holds cross. The witness itself is checked against a lock that
// grants everything in TestKindWitness.
func TestKinds(t *testing.T) {
	env := newEnv(t)
	ctx := context.Background()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, kind := range Kinds {
		for _, procs := range []int{0, 2} {
			cell := KindCell(kind, 0, procs)
			cell.W, cell.Hot, cell.MaxProcs = 4, 30, 0
			t.Run(cell.Name(), func(t *testing.T) {
				var res Result
				if procs > 0 {
					res = env.RunProcs(ctx, cell, 300*time.Millisecond, 2, func() *exec.Cmd { return exec.Command(exe) })
				} else {
					run, err := env.NewRun(ctx, cell)
					if err != nil {
						t.Fatal(err)
					}
					defer run.Close()
					if err := run.Verify(ctx, 3); err != nil {
						t.Fatal(err)
					}
					res = run.round(ctx, 40, false)
				}
				if res.Err != nil {
					t.Fatal(res.Err)
				}
				if res.Batches == 0 || res.Violations != 0 {
					t.Fatalf("%d batches, %d violations, %d waits ran out", res.Batches, res.Violations, res.RanOut)
				}
			})
		}
	}
}

// TestKindWitness checks the exclusion witness of the kind cells against
// a lock that grants every request at once: writers over readers of a
// shared key (mixed) and units above PermitLimit (permits) are violations,
// while readers together are not (a request of shared keys only never
// counts one). Kills the mutation that drops the limit from claimAsk
// (checked); the two directions of writer against reader each kill the
// other's mutation here, and one alone is killed by TestCheckHolds
// ("writer over reader", "reader over writer": checked).
func TestKindWitness(t *testing.T) {
	env := newEnv(t)
	ctx := context.Background()
	grantAll := Factory{Name: "grant-all", New: func(*Env, int) (Contender, error) { return noLock{}, nil }}
	for _, kind := range []string{KindMixed, KindPermits} {
		t.Run(kind, func(t *testing.T) {
			cell := Cell{Contender: "grant-all", K: ContendedK, W: 8, Hot: 12, Kind: kind}
			run, err := env.newRun(ctx, cell, grantAll)
			if err != nil {
				t.Fatal(err)
			}
			defer run.Close()
			if err := run.Verify(ctx, 30); !errors.Is(err, ErrNotHeld) {
				t.Fatalf("Verify = %v, want a violation (ErrNotHeld)", err)
			}
		})
	}
	x := newExclusion(4)
	readers := KindAsk{Shared: []int{1, 2}}
	if v := x.claimAsk(readers, 0) + x.claimAsk(readers, 1); v != 0 {
		t.Fatalf("two readers of one key: %d violations, want 0", v)
	}
}

func (noLock) Ask(context.Context, KindAsk, string, func(int) string) (Held, error) {
	return noLock{}, nil
}
