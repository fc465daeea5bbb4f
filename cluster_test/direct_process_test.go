package clustertest

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"net"
	"sync/atomic"
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

func TestSeparateProcessesExclusiveWithAKilledGrantee(t *testing.T) {
	// A waiter process stands in the line of six keys (over three
	// nodes) the test holds; the test releases them, which hands each to
	// it, and it is granted directly (no confirm: its keys stay in
	// reserved form). It reports at once, and 25 ms after Lock returned
	// it stops reaching Redis (frozenDialer: its conversion, due 125 ms
	// after the grant, is never sent); the test SIGKILLs it on its
	// report. Its keys are reservations written before its grant,
	// so each lapses less than lockval.ReserveTTL after it
	// (direct-grant.md 5.5): a live taker, the test, trying all six
	// every 2 ms, gets them within ReserveTTL + 300 ms of the grant. A
	// lease that converted its keys at the grant would keep them for
	// its TTL (10 s).
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
	granted := make(chan contenderEvent, 1)
	victim := &contenderProc{}
	victim.child = startChild(t, "TestContenderProcess", "contender", envContenderSpec,
		contenderSpec{Addrs: e.c.Addrs(), Prefix: e.prefix, TTL: 10 * time.Second, Keys: keys, Freeze: true},
		contenderLine, func(line string) {
			var ev contenderEvent
			if err := json.Unmarshal([]byte(line), &ev); err == nil && (ev.Event == "granted" || ev.Event == "error") {
				select {
				case granted <- ev:
				default:
				}
			}
		}, func() {})
	deadline := time.Now().Add(20 * time.Second)
	for !queuedEverywhere(ctx, client, e.names, keys) {
		if time.Now().After(deadline) {
			t.Fatal("the waiter process never joined every line")
		}
		time.Sleep(time.Millisecond)
	}
	// At once: the hand-offs then pop entries the waiter's join round
	// created a moment ago, and its evidence is fresh (rule M).
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
	var ev contenderEvent
	select {
	case ev = <-granted:
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter process was not granted within 10 s of the release")
	}
	victim.kill()
	if ev.Event == "error" {
		t.Fatalf("the waiter process: %s", ev.Err)
	}
	if !ev.Direct || ev.Reserved != len(keys) {
		t.Errorf("the waiter was not granted directly: direct %v, %d of %d keys reserved for it after the grant", ev.Direct, ev.Reserved, len(keys))
	}
	const bound = lockval.ReserveTTL + 300*time.Millisecond
	taker := e.locker(e.client(), slotlock.Options{TTL: 30 * time.Second})
	var tl *slotlock.Lease
	for tl == nil {
		if tl, err = taker.TryLock(ctx, keys...); err != nil && !errors.Is(err, slotlock.ErrNotAcquired) {
			t.Fatal(err)
		}
		if tl == nil {
			if blocked := time.Duration(sysMonotonic() - ev.From); blocked > bound+time.Second {
				t.Fatalf("the killed grantee's keys still blocked a taker %v after its grant, bound %v", blocked, bound)
			}
			time.Sleep(2 * time.Millisecond) // a poll: the keys lapse without a message
		}
	}
	blocked := time.Duration(sysMonotonic() - ev.From)
	t.Logf("the killed grantee's keys were free %v after its grant", blocked)
	if blocked > bound {
		t.Errorf("the killed grantee's keys blocked a taker for %v after its grant, bound %v", blocked, bound)
	}
	if err := tl.Release(ctx); err != nil {
		t.Fatal(err)
	}
	e.requireUnlocked(2*lockval.EntryTTL + time.Second)
}
