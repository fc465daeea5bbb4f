package clustertest

import (
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/slotlock/slotlock"
	"github.com/slotlock/slotlock/internal/lockval"
	"github.com/slotlock/slotlock/slot"
)

func TestFIFOAcrossSeparateProcesses(t *testing.T) {
	// Six waiter processes, each one client and one Locker, wait for the
	// same three keys (in three slots) while the test holds them; each
	// starts only once the one before stands in all three lines. Waiters
	// by reservation are served in ticket order (docs/design.md, "Waiting
	// by reservation across processes": a release hands a key to the
	// oldest live entry), so the test's release starts a chain in which
	// each is granted after the one before released. The order asserted
	// is exact, and it is the join order too: a ticket is the waiter's
	// estimate of server time when it starts waiting, and consecutive
	// waiters here start a process start-up apart (tens of ms), far more
	// than the error of such an estimate (one round trip of TIME).
	e := newEnv(t, 3*time.Minute)
	e.waitReady()
	client := e.client()
	ctx := e.ctx
	keys := []string{"fifo:a", "fifo:b", "fifo:c"}
	holder := e.locker(client, slotlock.Options{TTL: 30 * time.Second})
	h, err := holder.Lock(ctx, keys...)
	if err != nil {
		t.Fatal(err)
	}
	const n = 6
	queue := func(k string) []string { // members of k's line, oldest first
		q := e.names.QueueKeyInSlot(k, slot.KeySlot(k))
		m, err := client.Do(ctx, client.B().Zrange().Key(q).Min("0").Max("-1").Build()).AsStrSlice()
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	var procs []*contenderProc
	for i := range n {
		procs = append(procs, startContender(t, contenderSpec{Addrs: e.c.Addrs(), Prefix: e.prefix,
			TTL: 10 * time.Second, Keys: keys, Release: true, Hold: 2 * time.Millisecond}))
		deadline := time.Now().Add(20 * time.Second)
		for slices.ContainsFunc(keys, func(k string) bool { return len(queue(k)) != i+1 }) {
			if time.Now().After(deadline) {
				t.Fatalf("waiter %d never stood in every line", i)
			}
			time.Sleep(time.Millisecond)
		}
	}
	// The line, by ticket: the same in every key's queue.
	var line []string
	for _, k := range keys {
		var tokens []string
		for _, m := range queue(k) {
			tokens = append(tokens, lockval.QueueEntry(m).Token)
		}
		if line == nil {
			line = tokens
		} else if !slices.Equal(line, tokens) {
			t.Fatalf("lines differ: %v and %v", line, tokens)
		}
	}
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
	var held []contenderEvent
	var joined map[string]int // token -> the waiter's place in the start order
	deadline := time.Now().Add(30 * time.Second)
	for {
		held, joined = held[:0], map[string]int{}
		for i, p := range procs {
			evs, perr := p.snapshot()
			if perr != "" {
				t.Fatalf("waiter %d: %s", i, perr)
			}
			for _, ev := range evs {
				if ev.Event == "held" {
					held = append(held, ev)
					joined[ev.Token] = i
				}
			}
		}
		if len(held) == n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("only %d of %d waiters were granted and released", len(held), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
	checkIntervals(t, held)
	sort.Slice(held, func(i, j int) bool { return held[i].From < held[j].From })
	var granted []string
	var order []int
	for _, ev := range held {
		granted = append(granted, ev.Token)
		order = append(order, joined[ev.Token])
	}
	t.Logf("granted in start order %v", order)
	if !slices.Equal(granted, line) {
		t.Errorf("granted out of ticket order:\n granted %s\n line    %s", strings.Join(granted, " "), strings.Join(line, " "))
	}
	if !slices.IsSorted(order) {
		t.Errorf("granted in start order %v, want 0..%d", order, n-1)
	}
	for _, p := range procs {
		p.stop(10 * time.Second)
	}
	e.requireUnlocked(2*lockval.EntryTTL + time.Second)
}
