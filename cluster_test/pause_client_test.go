package clustertest

import (
	"encoding/json"
	"errors"
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
