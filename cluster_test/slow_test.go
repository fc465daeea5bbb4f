package clustertest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/slotlock/slotlock"
)

// deadlineSlack is the scheduling slack allowed on top of a documented
// bound for a call to return after its context's deadline, beyond the
// lateness a lagMeter saw in the same test: on a loaded machine (load
// 14, docker) a 200 ms CleanupTimeout returned 451 and 577 ms after the
// deadline, the machine's own timer lateness, not the library's.
const deadlineSlack = 250 * time.Millisecond

// lagMeter measures how late this process runs a timer: a goroutine
// sleeps 5 ms in a loop and keeps the largest excess. A call that returns
// late by the machine's scheduling is allowed that much more; one that
// returns late by itself (a waiter held by another's unsubscribe, a
// rollback not bounded by CleanupTimeout) still exceeds the bound.
type lagMeter struct {
	max  atomic.Int64
	stop chan struct{}
	done chan struct{}
}

func startLagMeter(t *testing.T) *lagMeter {
	m := &lagMeter{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(m.done)
		const tick = 5 * time.Millisecond
		for {
			t0 := time.Now()
			select {
			case <-m.stop:
				return
			case <-time.After(tick):
			}
			if late := int64(time.Since(t0) - tick); late > m.max.Load() {
				m.max.Store(late)
			}
		}
	}()
	t.Cleanup(func() { close(m.stop); <-m.done })
	return m
}

// Max is the largest timer lateness seen so far.
func (m *lagMeter) Max() time.Duration { return time.Duration(m.max.Load()) }

// TestSlowNode stalls a master without stopping it: DEBUG SLEEP (the node
// runs nothing, its sockets stay open) or CLIENT PAUSE ALL (the node keeps
// its cluster bus and replication going but serves no client), for longer
// than the calls' deadlines. Asserted:
//   - Lock and TryLock honour their context: they return within the
//     deadline plus Options.CleanupTimeout (the rollback runs on a detached
//     context bounded by it) plus deadlineSlack (late returns are also
//     counted in the report, see TestWakerUnsubscribeStall);
//   - once the node recovers, nothing is left locked: every lock key of the
//     test's prefix, read on every master, is gone when all workers have
//     released, apart from keys of lost replies, which must run out within
//     their TTL.
func TestSlowNode(t *testing.T) {
	for _, fault := range []string{"debug-sleep", "client-pause"} {
		t.Run(fault, func(t *testing.T) {
			s := chaosScale()
			e := newEnv(t, pick(s, 2*time.Minute, 15*time.Minute))
			const ttl = 2 * time.Second
			stall := pick(s, 2*time.Second, 4*time.Second)
			rounds := pick(s, 1, 5)
			space := keySpace(40)
			w := &workload{
				e:        e,
				name:     "workers",
				opt:      slotlock.Options{TTL: ttl, Renew: slotlock.RenewAlways},
				space:    space,
				workers:  4,
				maxBatch: 6,
				attempt:  300 * time.Millisecond,
				holdMax:  30 * time.Millisecond,
				seed:     9,
			}
			w.start()
			type probeKind struct {
				name    string
				cleanup time.Duration // Options.CleanupTimeout; 0 is the default
			}
			kinds := []probeKind{{"cleanup-default", 0}, {"cleanup-200ms", 200 * time.Millisecond}}
			var mu sync.Mutex
			overruns := map[string]durations{}
			calls, late := 0, 0
			lag := startLagMeter(t)
			type lateCall struct {
				name, err   string
				over, limit time.Duration
				cleanup     time.Duration
			}
			var lates []lateCall // checked after the rounds, against the lag seen by then
			for round := range rounds {
				time.Sleep(500 * time.Millisecond)
				victim := e.master(e.ctx, fmt.Sprintf("slow%d", round))
				onVictim := e.keysOn(e.ctx, victim, space)
				stop := make(chan struct{})
				var wg sync.WaitGroup
				for pi, k := range kinds {
					cleanup := k.cleanup
					if cleanup == 0 {
						cleanup = slotlock.DefaultCleanupTimeout
					}
					l := e.locker(e.client(), slotlock.Options{TTL: ttl, Renew: slotlock.RenewAlways, CleanupTimeout: k.cleanup})
					for g := range 2 {
						wg.Add(1)
						go func() {
							defer wg.Done()
							r := rand.New(rand.NewPCG(uint64(round), uint64(pi*10+g)))
							for {
								select {
								case <-stop:
									return
								default:
								}
								keys := []string{onVictim[r.IntN(len(onVictim))], space[r.IntN(len(space))]}
								limit := []time.Duration{50 * time.Millisecond, 200 * time.Millisecond, 500 * time.Millisecond}[r.IntN(3)]
								ctx, cancel := context.WithTimeout(e.ctx, limit)
								dl, _ := ctx.Deadline()
								var lease *slotlock.Lease
								var err error
								try := r.IntN(2) == 0
								if try {
									lease, err = l.TryLock(ctx, keys...)
								} else {
									lease, err = l.Lock(ctx, keys...)
								}
								over := time.Since(dl)
								cancel()
								mu.Lock()
								calls++
								if over > 0 {
									name := k.name + "/lock"
									if try {
										name = k.name + "/trylock"
									}
									overruns[name] = append(overruns[name], over)
									if over > cleanup+deadlineSlack {
										lates = append(lates, lateCall{name: name, err: fmt.Sprint(err), over: over, limit: limit, cleanup: cleanup})
									}
								}
								mu.Unlock()
								if err == nil {
									_ = lease.Release(e.ctx)
								} else if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, slotlock.ErrNotAcquired) {
									time.Sleep(10 * time.Millisecond)
								}
							}
						}()
					}
				}
				time.Sleep(300 * time.Millisecond)
				switch fault {
				case "debug-sleep":
					ctx, cancel := context.WithTimeout(e.ctx, stall+10*time.Second)
					err := victim.Do(ctx, "DEBUG", "SLEEP", fmt.Sprintf("%.3f", stall.Seconds())).Error()
					cancel()
					if err != nil {
						t.Fatalf("DEBUG SLEEP on %s: %v", victim.Addr(), err)
					}
				case "client-pause":
					if err := victim.Do(e.ctx, "CLIENT", "PAUSE", fmt.Sprint(stall.Milliseconds()), "ALL").Error(); err != nil {
						t.Fatalf("CLIENT PAUSE on %s: %v", victim.Addr(), err)
					}
					time.Sleep(stall)
				}
				time.Sleep(time.Second) // calls that straddle the end of the stall
				close(stop)
				wg.Wait()
				e.waitReady()
			}
			w.stopAndWait()
			w.record(e.rep)
			v := e.hist.check(t, false)
			v.requireSafe(t)
			t.Logf("timer lateness of this process: at most %v", lag.Max().Round(time.Millisecond))
			for _, c := range lates {
				if bound := c.cleanup + deadlineSlack + lag.Max(); c.over > bound {
					late++
					t.Errorf("%s returned %v after its %v deadline (CleanupTimeout %v, bound %v with the machine's lag): %v", c.name, c.over.Round(time.Millisecond), c.limit, c.cleanup, bound.Round(time.Millisecond), c.err)
				}
			}

			// Right after recovery, lock keys may remain from calls whose
			// reply the client gave up on: the node ran them after the
			// client's rollback (or never got the rollback). They must go
			// within their TTL.
			leftAt := time.Now()
			left, err := e.lockKeys(e.ctx)
			if err != nil {
				t.Fatal(err)
			}
			var maxTTL time.Duration
			for _, k := range left {
				maxTTL = max(maxTTL, k.PTTL)
				if k.PTTL < 0 || k.PTTL > ttl {
					t.Errorf("left locked with pttl %v (TTL %v): %v", k.PTTL, ttl, k)
				}
			}
			e.requireUnlocked(ttl + time.Second)
			e.rep.set("faults", fmt.Sprintf("%d x %s %v", rounds, fault, stall))
			e.rep.set("probe_calls", calls)
			for _, k := range kinds {
				e.rep.set("overrun_"+k.name+"_lock", overruns[k.name+"/lock"].String())
				e.rep.set("overrun_"+k.name+"_trylock", overruns[k.name+"/trylock"].String())
			}
			e.rep.set("late_returns", late)
			e.rep.set("violations", v.Violations())
			e.rep.set("left_locked_after_recovery", len(left))
			e.rep.set("left_locked_max_pttl", maxTTL)
			e.rep.set("left_locked_gone_after", time.Since(leftAt).Round(time.Millisecond))
			e.rep.print()
		})
	}
}

// TestWakerUnsubscribeStall is the regression test of waiters of one
// Locker that missed their deadlines because another of its waiters gave up
// on a stalled node (fixed in d2fb205: waiters unsubscribe in the
// background). A waiter that ended sent SUNSUBSCRIBE with a fixed
// one-second timeout while it held the Locker's waker mutex; on a stalled
// node that second was spent in full, and every other waiter of the Locker,
// on any node, needed the same mutex to start or end its wait. Waiters on
// healthy nodes returned seconds after their deadline, one second per
// waiter queued ahead.
func TestWakerUnsubscribeStall(t *testing.T) {
	e := newEnv(t, time.Minute)
	lag := startLagMeter(t)
	const cleanup = 100 * time.Millisecond
	holder := e.locker(e.client(), slotlock.Options{TTL: 30 * time.Second})
	l := e.locker(e.client(), slotlock.Options{TTL: 30 * time.Second, CleanupTimeout: cleanup})
	victim := e.master(e.ctx, "stall")
	onVictim, elsewhere := e.keysSplitBy(victim, "stall", 4, 4)
	onVictim, elsewhere = onVictim[:4], elsewhere[:4]
	if _, err := holder.Lock(e.ctx, append(slicesClone(onVictim), elsewhere...)...); err != nil {
		t.Fatal(err)
	}
	wait := func(k string, limit time.Duration, over chan<- time.Duration) {
		ctx, cancel := context.WithTimeout(e.ctx, limit)
		defer cancel()
		dl, _ := ctx.Deadline()
		_, err := l.Lock(ctx, k)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Lock(%q): %v, want a deadline error", k, err)
		}
		over <- time.Since(dl)
	}
	// Four waiters on the stalled node give up one second in; then four
	// waiters on healthy nodes start, with 300 ms each.
	victimOver, healthyOver := make(chan time.Duration, 4), make(chan time.Duration, 4)
	for _, k := range onVictim {
		go wait(k, time.Second, victimOver)
	}
	time.Sleep(300 * time.Millisecond)
	sleep := make(chan error, 1)
	go func() { sleep <- victim.Do(e.ctx, "DEBUG", "SLEEP", "4.5").Error() }()
	time.Sleep(900 * time.Millisecond)
	for _, k := range elsewhere {
		go wait(k, 300*time.Millisecond, healthyOver)
	}
	var healthy, stalled []time.Duration
	for range 4 {
		healthy = append(healthy, <-healthyOver)
	}
	for range 4 {
		stalled = append(stalled, <-victimOver)
	}
	bound := cleanup + deadlineSlack + lag.Max()
	t.Logf("timer lateness of this process: at most %v", lag.Max().Round(time.Millisecond))
	for _, d := range healthy {
		if d > bound {
			t.Errorf("a waiter on a healthy node returned %v after its deadline; bound %v", d.Round(time.Millisecond), bound)
		}
	}
	for _, d := range stalled {
		if d > bound {
			t.Errorf("a waiter on the stalled node returned %v after its deadline; bound %v", d.Round(time.Millisecond), bound)
		}
	}
	if err := <-sleep; err != nil {
		t.Logf("DEBUG SLEEP: %v", err)
	}
}

func slicesClone(s []string) []string { return append([]string(nil), s...) }
