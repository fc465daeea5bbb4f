package clustertest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/slotlock/slotlock"
)

// The holder process is this test binary run again with envHelper set: the
// classic Go pattern for a child process (os/exec's own tests do it). It
// takes one lease, reports it on stdout, and then only lives until the test
// kills it with SIGKILL: a crash with no chance to release.
const (
	envHelper     = "SLOTLOCK_CHAOS_HELPER"
	envHolderSpec = "SLOTLOCK_CHAOS_HOLDER"
	holderLine    = "HOLDER "
)

// holderSpec is what the holder process is asked to lock.
type holderSpec struct {
	Addrs  []string
	Prefix string
	Keys   []string
	TTL    time.Duration
	Renew  bool
	// Shared and Permits, when set, make the holder take its lease with
	// Locker.Acquire: Keys exclusive, these shared and counted.
	Shared  []string
	Permits []slotlock.Permit
}

// holderEvent is one line of the holder's stdout. Times are sysMonotonic
// readings of the holder process, comparable with the test's.
type holderEvent struct {
	Event    string // "granted", "renewed" or "error"
	Token    string
	Fences   map[string]int64
	Sent     int64 // the granting attempt was sent (Deadline - TTL)
	Granted  int64 // Lock returned
	Deadline int64 // Lease.Deadline: the keys expire no earlier
	Err      string
}

// TestHelperProcess is the holder process; run directly it does nothing.
func TestHelperProcess(t *testing.T) {
	if os.Getenv(envHelper) != "holder" {
		t.Skip("the holder process of TestHolderProcessKilled; not a test by itself")
	}
	emit := func(ev holderEvent) {
		b, _ := json.Marshal(ev)
		fmt.Fprintf(os.Stdout, "%s%s\n", holderLine, b)
	}
	var spec holderSpec
	if err := json.Unmarshal([]byte(os.Getenv(envHolderSpec)), &spec); err != nil {
		emit(holderEvent{Event: "error", Err: err.Error()})
		os.Exit(2)
	}
	// The parent closes stdin when it is done or dies: never outlive it.
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		os.Exit(0)
	}()
	tl := newTimeline()
	sys := func(t time.Time) int64 { return tl.at(t) + tl.sysOffset }
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: spec.Addrs})
	if err != nil {
		emit(holderEvent{Event: "error", Err: err.Error()})
		os.Exit(2)
	}
	renew := slotlock.RenewNever
	if spec.Renew {
		renew = slotlock.RenewAlways
	}
	l, err := slotlock.New(client, slotlock.Options{TTL: spec.TTL, Renew: renew, Fencing: true, Prefix: spec.Prefix})
	if err != nil {
		emit(holderEvent{Event: "error", Err: err.Error()})
		os.Exit(2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	var lease *slotlock.Lease
	if len(spec.Shared)+len(spec.Permits) > 0 {
		lease, err = l.Acquire(ctx, slotlock.Request{Exclusive: spec.Keys, Shared: spec.Shared, Permits: spec.Permits, Wait: slotlock.WaitForever})
	} else {
		lease, err = l.Lock(ctx, spec.Keys...)
	}
	granted := sysMonotonic()
	cancel()
	if err != nil {
		emit(holderEvent{Event: "error", Err: err.Error()})
		os.Exit(2)
	}
	ev := holderEvent{Event: "granted", Token: lease.Token(), Fences: map[string]int64{},
		Sent: sys(lease.Deadline().Add(-spec.TTL)), Granted: granted, Deadline: sys(lease.Deadline())}
	for _, k := range lease.Keys() {
		ev.Fences[k], _ = lease.FencingToken(k)
	}
	emit(ev)
	last := lease.Deadline()
	for {
		time.Sleep(time.Millisecond)
		if d := lease.Deadline(); d.After(last) {
			last = d
			emit(holderEvent{Event: "renewed", Deadline: sys(d)})
		}
	}
}

// holderProc is a running holder process.
type holderProc struct {
	*child
	events chan holderEvent
}

// startHolder runs a holder process for spec; the test's cleanup kills and
// reaps it if the test did not.
func startHolder(t *testing.T, spec holderSpec) *holderProc {
	t.Helper()
	p := &holderProc{events: make(chan holderEvent, 1024)}
	p.child = startChild(t, "TestHelperProcess", "holder", envHolderSpec, spec, holderLine,
		func(line string) {
			var ev holderEvent
			if err := json.Unmarshal([]byte(line), &ev); err == nil {
				p.events <- ev
			}
		},
		func() { close(p.events) })
	return p
}

// next returns the next event, or fails after limit.
func (p *holderProc) next(t *testing.T, limit time.Duration) holderEvent {
	t.Helper()
	select {
	case ev, ok := <-p.events:
		if !ok {
			p.kill()
			t.Fatalf("holder process exited without a report; stderr:\n%s", p.stderr.String())
		}
		if ev.Event == "error" {
			t.Fatalf("holder process: %s", ev.Err)
		}
		return ev
	case <-time.After(limit):
		t.Fatalf("no report from the holder process in %v", limit)
	}
	return holderEvent{}
}
