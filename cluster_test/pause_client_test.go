package clustertest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/slotlock/slotlock"
	"github.com/slotlock/slotlock/internal/lockval"
)

func TestAPausedGranteeKeepsItsKeys(t *testing.T) {
	// A waiter process stands in the line of six keys (over three nodes)
	// the test holds; the test releases them, which hands each to it, and
	// it is granted. The test SIGSTOPs it the moment it reports the grant
	// (a container throttled, a VM's stolen time) and keeps it stopped
	// for four reservation lives, far under its 10 s TTL, while a taker
	// tries the keys every 5 ms: a lease holds every key for its TTL from
	// the request that granted it, so the taker never gets one while the
	// grantee sleeps. Then it resumes, holds, releases and reports its
	// interval, and the taker gets the keys. Mutation: a grant that
	// returns while the keys are still the waiter's reservations (500 ms,
	// the former direct grant: `direct := true` in lockByReservation)
	// lets the taker in about 500 ms into the pause; this test fails.
	e := newEnv(t, 2*time.Minute)
	e.waitReady()
	client := e.client()
	ctx := e.ctx
	keys := []string{"kg:1", "kg:2", "kg:3", "kg:4", "kg:5", "kg:6"}
	holder := e.locker(client, slotlock.Options{TTL: 30 * time.Second})
	h, err := holder.Lock(ctx, keys...)
	if err != nil {
		t.Fatal(err)
	}
	grantee, next := startReporting(t, "waiter", contenderSpec{Addrs: e.c.Addrs(), Prefix: e.prefix, TTL: 10 * time.Second, Keys: keys, Release: true, Hold: 50 * time.Millisecond})
	deadline := time.Now().Add(20 * time.Second)
	for !queuedEverywhere(ctx, client, e.names, keys) {
		if time.Now().After(deadline) {
			t.Fatal("the waiter process never joined every line")
		}
		time.Sleep(time.Millisecond)
	}
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
	granted := next("granted")
	if err := grantee.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := sysMonotonic()
	const pause = 4 * lockval.ReserveTTL
	taker := e.locker(e.client(), slotlock.Options{TTL: 30 * time.Second})
	tries := 0
	for time.Duration(sysMonotonic()-stopped) < pause {
		tl, err := taker.TryLock(ctx, keys...)
		if err != nil && !errors.Is(err, slotlock.ErrNotAcquired) {
			t.Fatal(err)
		}
		tries++
		if tl != nil {
			t.Errorf("a taker got the keys %v after the grant, while the grantee (TTL 10 s) was stopped", time.Duration(sysMonotonic()-granted.From))
			if err := tl.Release(ctx); err != nil {
				t.Fatal(err)
			}
			break
		}
		time.Sleep(5 * time.Millisecond) // a poll, not an ordering
	}
	t.Logf("the grantee was stopped %v after its grant; %d tries of a taker while it was stopped", time.Duration(stopped-granted.From), tries)
	if err := grantee.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	held := next("held")
	tl, err := taker.Lock(ctx, keys...)
	if err != nil {
		t.Fatal(err)
	}
	took := sysMonotonic()
	if err := tl.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if took < held.To {
		t.Errorf("the taker got the keys before the grantee released them")
	}
	grantee.kill()
	e.requireUnlocked(2*lockval.EntryTTL + time.Second)
}

func TestAHolderPausedPastItsTTL(t *testing.T) {
	// A holder process (TTL 1 s, fenced) is SIGSTOPped for three TTLs
	// right after its grant; meanwhile a taker gets the keys, with larger
	// fencing tokens (a store that keeps the largest token refuses the
	// paused holder's writes). When the holder resumes, its first look
	// at its lease, a millisecond after it runs again, already finds it
	// ended as lost: Lease.Err names the lost keys, the lease's context
	// is cancelled with that cause, and a guarded write is refused. The
	// taker still holds the keys. Mutation: Lease.Err without its clock
	// check (the watchdog has not run yet at the first look; fails).
	e := newEnv(t, 2*time.Minute)
	e.waitReady()
	ctx := e.ctx
	keys := []string{"pp:1", "{pp:1}x", "pp:2", "pp:3"}
	const ttl = time.Second
	holder, next := startReporting(t, "holder", contenderSpec{Addrs: e.c.Addrs(), Prefix: e.prefix, TTL: ttl, Keys: keys, Fencing: true, Resumed: true, GuardKey: "{pp:1}data"})
	granted := next("granted")
	if err := holder.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	taker := e.locker(e.client(), slotlock.Options{TTL: 30 * time.Second, Fencing: true})
	tctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	tl, err := taker.Lock(tctx, keys...)
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	if f, _ := tl.FencingToken(keys[0]); f <= granted.Fence {
		t.Errorf("the taker's fence %d is not above the paused holder's %d", f, granted.Fence)
	}
	if d := time.Until(stopped.Add(3 * ttl)); d > 0 {
		time.Sleep(d) // the pause's length, not an ordering
	}
	if err := holder.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	ev := next("resumed")
	if !strings.Contains(ev.LeaseErr, "no longer held") {
		t.Errorf("Lease.Err at the first look after the pause: %q, want the lease lost", ev.LeaseErr)
	}
	if ev.CtxErr == "" || ev.CtxErr != ev.LeaseErr {
		t.Errorf("the lease context's cause at the first look: %q, want Lease.Err's (%q)", ev.CtxErr, ev.LeaseErr)
	}
	if ev.GuardErr == "" {
		t.Error("a guarded write after the pause was not refused")
	}
	client := e.client()
	for _, k := range keys {
		v, err := client.Do(ctx, client.B().Get().Key(e.names.LockKey(k)).Build()).ToString()
		if err != nil || lockval.Holder(v) != tl.Token() {
			t.Errorf("key %s after the holder resumed: %q %v, want the taker's", k, v, err)
		}
	}
	if n, err := client.Do(ctx, client.B().Exists().Key("{pp:1}data").Build()).AsInt64(); err != nil || n != 0 {
		t.Errorf("the paused holder's guarded write landed (%d, %v)", n, err)
	}
	if err := tl.Release(ctx); err != nil {
		t.Fatal(err)
	}
	holder.kill()
	e.requireUnlocked(2*lockval.EntryTTL + time.Second)
}

func TestClientPausesEveryKind(t *testing.T) {
	// Five processes, each one client and one Locker (TTL 10 s) with four
	// workers, lock random batches of 1-6 of 32 keys in a loop, holding
	// each 5 ms, each process a kind of lease:
	// plain, reentrant (an owner of its own), fenced, and two with
	// Locker.Acquire requests (shared keys, an exclusive one in a third
	// of them, permits of a resource of limit 2 in half). Meanwhile one
	// process at a time is stopped (SIGSTOP) for 50-1,500 ms and resumed:
	// half the pauses at a random moment (while it waits, or holds), half
	// the moment some process reports a grant (while it holds). Every pause is far
	// under the TTL, so no hold may overlap another: porcupine checks the
	// history of every hold (no exclusive hold of a key overlaps another
	// hold of it, no resource over its limit), and the fenced process's
	// holds for growing fences; and every grant's Deadline, read at the
	// grant, is at least the TTL after Lock was called (a holder counts
	// on its keys until that Deadline, however long it is paused).
	// Precondition: some pauses hit a holder. Mutation: the former direct
	// grant (`direct := true`): grants with Deadlines about 500 ms ahead.
	sc := chaosScale()
	e := newEnv(t, pick(sc, 3*time.Minute, 10*time.Minute))
	e.waitReady()
	space := keySpace(32)
	run := pick(sc, 20*time.Second, 2*time.Minute)
	kinds := []string{"", "reentrant", "fenced", "request", "request"}
	procs := make([]*contenderProc, len(kinds))
	granted := make(chan int, 64) // the processes' grants as they report them
	for i, kind := range kinds {
		spec := contenderSpec{Addrs: e.c.Addrs(), Prefix: e.prefix, TTL: 10 * time.Second, Space: space, KMax: 6,
			Seed: uint64(300 + i), Hold: 5 * time.Millisecond, Workers: 4, History: true, Announce: true, Kind: kind}
		if kind == "fenced" {
			spec.Kind, spec.Fencing = "", true
		}
		procs[i] = startContenderWith(t, spec, func(ev contenderEvent) {
			if ev.Event == "granted" {
				select {
				case granted <- i:
				default:
				}
			}
		})
	}
	type pause struct {
		proc     int
		from, to int64 // sysMonotonic
	}
	var pauses []pause
	r := rand.New(rand.NewPCG(7, uint64(time.Now().UnixNano())))
	end := time.Now().Add(run)
	for time.Now().Before(end) {
		i := r.IntN(len(procs))
		if r.IntN(2) == 0 {
			for len(granted) > 0 { // the next grant, not one already reported
				<-granted
			}
			select {
			case i = <-granted:
			case <-time.After(5 * time.Second):
				continue
			}
		}
		p := procs[i]
		if err := p.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		from := sysMonotonic()
		time.Sleep(50*time.Millisecond + time.Duration(r.Int64N(int64(1450*time.Millisecond)))) // the pause's length
		if err := p.cmd.Process.Signal(syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
		pauses = append(pauses, pause{i, from, sysMonotonic()})
		time.Sleep(time.Duration(r.Int64N(int64(300 * time.Millisecond)))) // between pauses, not an ordering
	}
	h, fenced := newHistory(e.tl), newHistory(e.tl)
	spanned, timeouts, short := 0, 0, 0
	for i, p := range procs {
		for _, ev := range p.finish(t, i, 45*time.Second) {
			if ev.Event == "timeout" {
				timeouts++
			}
			if ev.Event != "held" {
				continue
			}
			if ttl := int64(10 * time.Second); ev.Until < ev.Call+ttl {
				short++
				// Which kind and how: 2 of 411 holds were short once at
				// load 20, with nothing to tell them apart.
				t.Logf("process %d (%q): hold granted %v after its call (%s), Deadline %v short of call + TTL",
					i, kinds[i], time.Duration(ev.From-ev.Call), ev.How, time.Duration(ev.Call+ttl-ev.Until))
			}
			for _, pz := range pauses {
				if pz.proc == i && ev.From < pz.from && pz.from < ev.To {
					spanned++
					break
				}
			}
			for _, hh := range []*history{h, fenced} {
				if hh == fenced && ev.Fences == nil {
					continue
				}
				hh.hs = append(hh.hs, &hold{ID: len(hh.hs) + 1, Owner: fmt.Sprintf("process %d", i), Token: ev.Token,
					Keys: ev.Keys, Shared: ev.Shared, Permits: ev.Permits, Fences: ev.Fences,
					Call: e.tl.fromSys(ev.Call), Granted: e.tl.fromSys(ev.From), End: e.tl.fromSys(ev.To), EndRet: e.tl.fromSys(ev.Ret),
					How: ev.How, ended: true})
			}
		}
	}
	v := h.check(t, false)
	fv := fenced.check(t, true)
	t.Logf("%d holds (%d fenced), %d pauses, %d holds spanned a pause of their own process, %d waits ran out (30 s)", v.Holds, fv.Holds, len(pauses), spanned, timeouts)
	e.rep.set("grants", v.Holds)
	e.rep.set("pauses", len(pauses))
	e.rep.set("violations", v.Violations()+fv.Violations())
	v.requireSafe(t)
	fv.requireSafe(t)
	if short > 0 {
		t.Errorf("%d grants had a Deadline less than the TTL after Lock was called", short)
	}
	if spanned == 0 {
		t.Error("no hold spanned a pause: the scenario did not pause a holder")
	}
	for i, p := range procs {
		n := 0
		evs, _ := p.snapshot()
		for _, ev := range evs {
			if ev.Event == "held" {
				n++
			}
		}
		if n == 0 {
			t.Errorf("process %d (%q) held nothing", i, kinds[i])
		}
	}
}

// startReporting starts a contender process with spec and returns it and
// next, which waits for its next report and fails t unless it is want.
// The bound is for a loaded machine, not a latency.
func startReporting(t *testing.T, who string, spec contenderSpec) (*child, func(want string) contenderEvent) {
	t.Helper()
	events := make(chan contenderEvent, 4)
	c := startChild(t, "TestContenderProcess", "contender", envContenderSpec, spec, contenderLine,
		func(line string) {
			var ev contenderEvent
			if err := json.Unmarshal([]byte(line), &ev); err == nil {
				events <- ev
			}
		}, func() {})
	next := func(want string) contenderEvent {
		t.Helper()
		select {
		case ev := <-events:
			if ev.Event != want {
				t.Fatalf("the %s process reported %q (%s), want %q", who, ev.Event, ev.Err, want)
			}
			return ev
		case <-time.After(90 * time.Second):
			t.Fatalf("the %s process did not report %q within 90 s", who, want)
		}
		panic("unreachable")
	}
	return c, next
}
