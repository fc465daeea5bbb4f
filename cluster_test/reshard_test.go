package clustertest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/slotlock/slotlock"
	"github.com/slotlock/slotlock/internal/redistest"
	"github.com/slotlock/slotlock/slot"
)

// TestReshardingUnderLoad moves slots that hold lock keys between masters
// (SETSLOT IMPORTING/MIGRATING, MIGRATE of the keys, SETSLOT NODE), again
// and again, while workers lock overlapping batches. The scripts meet MOVED,
// ASK, TRYAGAIN and "non local key" on the way. Asserted: the history of
// grants is linearizable per key (no double grant, fencing tokens grow
// across moves), no MIGRATE meets a lock or counter key that a script
// already wrote on its target (BUSYKEY), and nothing is left locked at the
// end (every failed attempt gave back what it took). A quarter of the keys
// share a hash tag four by four, so batches carry several keys of one slot:
// what the two migration bugs needed (TestMigratingSlotAsk,
// TestMigratingSlotFence). The "bare" mode takes plain leases (no fencing)
// over a wider key space, so that most first attempts take their keys with
// bare SET NX commands through the cluster client, which follows MOVED and
// ASK (batch.takeBare); the fenced modes never use them. The "replicated"
// mode adds MinReplicas: each node's calls end with a WAIT, which must
// count the writes of the calls on its own connection; through the cluster
// client, which follows redirections, rueidis v1.0.79 panicked within
// seconds (docs/faults.md, "The soak").
func TestReshardingUnderLoad(t *testing.T) {
	for _, m := range []struct {
		name     string
		perSlot  bool
		fencing  bool
		space    int
		replicas int
	}{{"per-node", false, true, 60, 0}, {"per-slot", true, true, 60, 0}, {"bare", false, false, 480, 0}, {"replicated", false, true, 60, 1}} {
		t.Run(m.name, func(t *testing.T) {
			s := chaosScale()
			e := newEnv(t, pick(s, 3*time.Minute, 30*time.Minute))
			space := keySpace(m.space)
			w := &workload{
				e:    e,
				name: m.name,
				opt: slotlock.Options{TTL: 5 * time.Second, Renew: slotlock.RenewAlways, Fencing: m.fencing, PerSlot: m.perSlot,
					MinReplicas: m.replicas, ReplicaTimeout: 500 * time.Millisecond},
				space:    space,
				workers:  6,
				maxBatch: 10,
				attempt:  3 * time.Second,
				holdMax:  20 * time.Millisecond,
				seed:     7,
				requests: true,
			}
			w.start()
			masters, err := e.c.Masters(e.ctx)
			if err != nil {
				t.Fatal(err)
			}
			r := rand.New(rand.NewPCG(5, 5))
			// Move slots back to back for a while, and at least a dozen.
			until := time.Now().Add(pick(s, 10*time.Second, 150*time.Second))
			moves, withLocks, busy := 0, 0, 0
			var took durations
			if noMoves() {
				// The same workload without faults: what the slot moves
				// cost, measured (docs/faults.md).
				time.Sleep(time.Until(until))
			}
			for i := 0; !noMoves() && (i < 12 || time.Now().Before(until)); i++ {
				s, locked := e.slotToMove(r, space)
				if locked {
					withLocks++
				}
				owner, err := e.c.NodeForSlot(e.ctx, s)
				if err != nil {
					t.Fatal(err)
				}
				to := masters[r.IntN(len(masters))]
				if to == owner {
					to = masters[(indexOf(masters, to)+1)%len(masters)]
				}
				t0 := time.Now()
				if err := e.c.MoveSlot(e.ctx, s, to); err != nil {
					if strings.Contains(err.Error(), "BUSYKEY") {
						// The importing node already has a key MIGRATE
						// brings: a script wrote it there while the
						// source still had it (as the two migration bugs
						// did). The slot stays half moved; stop moving.
						busy++
						t.Errorf("move %d of slot %d to %s: %v", i, s, to.Addr(), err)
						break
					}
					t.Fatalf("move %d of slot %d to %s: %v", i, s, to.Addr(), err)
				}
				took = append(took, time.Since(t0))
				moves++
			}
			time.Sleep(500 * time.Millisecond)
			w.stopAndWait()
			w.record(e.rep)
			v := e.hist.check(t, w.opt.Fencing)
			v.requireSafe(t)
			e.rep.set("fencing", w.opt.Fencing)
			e.rep.set("faults", fmt.Sprintf("%d slot moves (%d with lock keys in them)", moves, withLocks))
			e.rep.set("move_time", took.String())
			e.rep.set("violations", v.Violations())
			e.rep.set("keys_written_on_the_importing_node", busy)
			e.rep.print()
			// A node client that rueidis had closed once made per-node
			// calls fail for the rest of the run (bug 8 of docs/faults.md):
			// few grants, and keys that rollbacks could not reach.
			// With MinReplicas every grant waits for a replica, and a
			// redirection is not followed (a fresh slot map and a new
			// attempt instead).
			// Requests (every other worker) wait in Redis's lines and poll
			// for permits, never in the local queue: measured 443-701
			// grants for 804-1,166 moves (1,239 for 715 without them).
			// Replicated: 296 grants for ~1,150 moves without requests,
			// 182 with them (14 attempts timed out, 4 without).
			// The bound sits about 10x below what was measured (grants
			// per move are the machine's load), still far above the
			// bug's handful; at least one grant in any case.
			min := max(1, moves/20)
			if m.replicas > 0 {
				min = max(1, moves/60)
			}
			if g := e.hist.grants(); g < min {
				t.Errorf("only %d grants across %d moves", g, moves)
			}
			if busy == 0 {
				e.requireUnlocked(0)
			}
		})
	}
}

// envNoMoves, set to 1, runs TestReshardingUnderLoad's workload for the
// same time with no slot moves: the baseline its grants per move are read
// against (docs/faults.md). Not for CI: the test then checks what it
// checks without the faults it is about.
const envNoMoves = "SLOTLOCK_RESHARD_NO_MOVES"

func noMoves() bool { return os.Getenv(envNoMoves) == "1" }

// slotToMove picks the slot of a lock key that is held right now, or of a
// key of the space when none is.
func (e *env) slotToMove(r *rand.Rand, space []string) (uint16, bool) {
	ctx, cancel := context.WithTimeout(e.ctx, 10*time.Second)
	defer cancel()
	held, err := e.lockKeys(ctx)
	if err == nil && len(held) > 0 {
		n := r.IntN(len(held))
		for k := range held {
			if n == 0 {
				return slot.KeySlot(k), true
			}
			n--
		}
	}
	return slot.KeySlot(space[r.IntN(len(space))]), false
}

func indexOf(ns []*redistest.Node, n *redistest.Node) int {
	for i, x := range ns {
		if x == n {
			return i
		}
	}
	return -1
}

// TestMigratingSlotAsk is the regression test of a double grant the
// per-node engine made while a slot migrated (fixed in 5f263e4: node-wide
// calls now go to the node's own client and never follow ASK). The batch has two keys of one slot: the first (in
// canonical order) is free, the second is held by someone else, and the slot
// is MIGRATING on its owner and IMPORTING on another master, nothing moved
// yet. The free first key routed the per-node call; it does not exist on
// the source, so the source answered ASK; rueidis followed it (ASKING +
// EVALSHA) to the target, where under ASKING every key of the importing
// slot reads as absent, the held one included, and the script took both.
// Per-slot calls declare both keys and get TRYAGAIN instead.
func TestMigratingSlotAsk(t *testing.T) {
	for _, m := range []struct {
		name    string
		perSlot bool
	}{{"per-node", false}, {"per-slot", true}} {
		t.Run(m.name, func(t *testing.T) {
			e := newEnv(t, 2*time.Minute)
			client := e.client()
			a := e.locker(client, slotlock.Options{TTL: 20 * time.Second, PerSlot: m.perSlot})
			b := e.locker(client, slotlock.Options{TTL: 20 * time.Second, PerSlot: m.perSlot})
			first, second := "{order:7}:a", "{order:7}:b" // one slot; first sorts first
			held, err := b.Lock(e.ctx, second)
			if err != nil {
				t.Fatal(err)
			}
			src, dst, s := e.startMigration(first)
			lease, err := a.TryLock(e.ctx, first, second)
			if err == nil {
				t.Errorf("%q is held by lease %s on %s, yet TryLock(%q, %q) during the migration of slot %s granted both",
					second, held.Token(), src.Addr(), first, second, s)
				keys, _ := dst.Do(e.ctx, "CLUSTER", "GETKEYSINSLOT", s, "10").AsStrSlice()
				t.Logf("lock keys on the target %s: %v", dst.Addr(), keys)
				keys, _ = src.Do(e.ctx, "CLUSTER", "GETKEYSINSLOT", s, "10").AsStrSlice()
				t.Logf("lock keys on the source %s: %v", src.Addr(), keys)
				_ = lease
			} else {
				t.Logf("refused as it should be: %v", err)
			}
		})
	}
}

// TestMigratingSlotFence is the regression test of fencing tokens that went
// back to 1 while a slot migrated (fixed in 5f263e4: per-slot calls declare
// every key they touch, the counter included). The slot's fencing counter (P{T}#fence) has counted
// some grants on the source; the slot is then MIGRATING there and
// IMPORTING on another master, nothing moved yet. A free lock key does not
// exist on the source, so the acquire call was redirected by ASK to the
// target, where the counter did not exist yet (the script touched it
// without declaring it): INCR started it at 1, below tokens already handed
// out, and the counter on the target then blocked the migration: MIGRATE
// of the source's counter failed with BUSYKEY.
func TestMigratingSlotFence(t *testing.T) {
	for _, m := range []struct {
		name    string
		perSlot bool
	}{{"per-node", false}, {"per-slot", true}} {
		t.Run(m.name, func(t *testing.T) {
			e := newEnv(t, 2*time.Minute)
			l := e.locker(e.client(), slotlock.Options{TTL: 20 * time.Second, Fencing: true, PerSlot: m.perSlot})
			const key = "invoice:1"
			var last int64
			for range 5 {
				le, err := l.Lock(e.ctx, key)
				if err != nil {
					t.Fatal(err)
				}
				last, _ = le.FencingToken(key)
				if err := le.Release(e.ctx); err != nil {
					t.Fatal(err)
				}
			}
			_, dst, s := e.startMigration(key)
			// During the migration the grant is either refused as a
			// stale topology (on 7.0.15: TRYAGAIN, the counter is on the
			// source and the lock key nowhere) or, where a server lets
			// it through, a token above every earlier one.
			le, err := l.TryLock(e.ctx, key)
			if err != nil {
				if !errors.Is(err, slotlock.ErrStaleTopology) {
					t.Fatalf("during the migration: %v, want a grant or ErrStaleTopology", err)
				}
				t.Logf("refused during the migration: %v", err)
			} else {
				tok, _ := le.FencingToken(key)
				if tok <= last {
					t.Errorf("fencing token %d after %d: the counter restarted on the importing node %s", tok, last, dst.Addr())
				}
				keys, _ := dst.Do(e.ctx, "CLUSTER", "GETKEYSINSLOT", s, "10").AsStrSlice()
				t.Logf("keys of slot %s on the target %s: %v", s, dst.Addr(), keys)
				if err := le.Release(e.ctx); err != nil {
					t.Fatal(err)
				}
			}
			// The migration completes (the old bug's counter on the
			// target made MIGRATE fail with BUSYKEY here), and the next
			// grant, on the new owner, is above every earlier token.
			n, _ := strconv.Atoi(s)
			if err := e.c.MoveSlot(e.ctx, uint16(n), dst); err != nil {
				t.Fatalf("completing the migration: %v", err)
			}
			le, err = l.Lock(e.ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			tok, _ := le.FencingToken(key)
			if tok <= last {
				t.Errorf("fencing token %d after %d on the new owner %s", tok, last, dst.Addr())
			}
			if err := le.Release(e.ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}
