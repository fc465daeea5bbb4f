package clustertest

import (
	"context"
	"encoding/json"
	"errors"
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
	events := make(chan contenderEvent, 4)
	grantee := startChild(t, "TestContenderProcess", "contender", envContenderSpec,
		contenderSpec{Addrs: e.c.Addrs(), Prefix: e.prefix, TTL: 10 * time.Second, Keys: keys, Release: true, Hold: 50 * time.Millisecond},
		contenderLine, func(line string) {
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
				t.Fatalf("the waiter process reported %q (%s), want %q", ev.Event, ev.Err, want)
			}
			return ev
		case <-time.After(30 * time.Second):
			t.Fatalf("the waiter process did not report %q within 30 s", want)
		}
		panic("unreachable")
	}
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
	events := make(chan contenderEvent, 4)
	holder := startChild(t, "TestContenderProcess", "contender", envContenderSpec,
		contenderSpec{Addrs: e.c.Addrs(), Prefix: e.prefix, TTL: ttl, Keys: keys, Fencing: true, Resumed: true, GuardKey: "{pp:1}data"},
		contenderLine, func(line string) {
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
				t.Fatalf("the holder process reported %q (%s), want %q", ev.Event, ev.Err, want)
			}
			return ev
		case <-time.After(30 * time.Second):
			t.Fatalf("the holder process did not report %q within 30 s", want)
		}
		panic("unreachable")
	}
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
