package clustertest

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"net"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/slotlock/slotlock"
	"github.com/slotlock/slotlock/internal/lockval"
)

// The direct grant (docs/proposals/direct-grant.md) across OS processes:
// its section 6.6. The hooks the contender process uses for it are test
// code around the client it hands the library, not hooks in the library:
// here a dialer whose connections stop writing (a process that died at
// that moment, for the library's purposes).

// freezeAfter is how long after its grant a contender with Freeze stops
// reaching Redis: a fifth of the earliest its conversion is due
// (ReserveTTL/4) when its evidence is fresh.
const freezeAfter = lockval.ReserveTTL / 20

// errFrozen is what a frozen connection answers every write with.
var errFrozen = errors.New("frozen: this process is dead to Redis")

// frozenDialer dials connections that write normally until freeze, and
// never after: a write is refused (rueidis then drops the connection and
// dials again, which is refused too). Reads go on, so a reply already on
// its way is still taken in; nothing sent after freeze reaches Redis.
type frozenDialer struct{ frozen atomic.Bool }

func (f *frozenDialer) freeze() { f.frozen.Store(true) }

func (f *frozenDialer) dial(ctx context.Context, dst string, d *net.Dialer, cfg *tls.Config) (net.Conn, error) {
	if f.frozen.Load() {
		return nil, errFrozen
	}
	c, err := d.DialContext(ctx, "tcp", dst)
	if err != nil {
		return nil, err
	}
	return &frozenConn{Conn: c, f: f}, nil
}

type frozenConn struct {
	net.Conn
	f *frozenDialer
}

func (c *frozenConn) Write(b []byte) (int, error) {
	if c.f.frozen.Load() {
		return 0, errFrozen
	}
	return c.Conn.Write(b)
}

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
