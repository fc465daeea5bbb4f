package clustertest

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/slotlock/slotlock"
	"github.com/slotlock/slotlock/internal/lockval"
	"github.com/slotlock/slotlock/slot"
)

func TestSharedKeyHandedToAWaiterByReservationInAnotherProcess(t *testing.T) {
	// Waiting by reservation beside shared keys, across OS processes
	// (docs/design.md, "Why no deadlock still holds"): two readers in
	// this process hold k shared; a contender process locks {a, k}
	// exclusively and waits by reservation: it reserves a, stands in k's
	// line by its inbox entry and marks k. A reader that comes then is
	// refused (writer preference). The last reader's release hands k to
	// the waiting process (its reservation, by ticket, token and inbox),
	// which is granted only after that release was called. Mutation:
	// shared_release.lua deleting a marked key instead of hand_off (k is
	// free, not the waiter's, right after the release).
	e := newEnv(t, 2*time.Minute)
	e.waitReady()
	client := e.client()
	ctx := e.ctx
	const k, a = "srx:shared", "srx:free"
	const ttl = 2 * time.Second
	var readers []*slotlock.Lease
	for range 2 {
		r, err := e.locker(client, slotlock.Options{TTL: 30 * time.Second}).Acquire(ctx, slotlock.Request{Shared: []string{k}})
		if err != nil {
			t.Fatal(err)
		}
		readers = append(readers, r)
	}
	get := func(key string) string { return e.lockValue(ctx, client, key) }
	w := startContender(t, contenderSpec{Addrs: e.c.Addrs(), Prefix: e.prefix, TTL: ttl, Keys: []string{a, k}})
	q := e.names.QueueKeyInSlot(k, slot.KeySlot(k))
	var res lockval.Reservation
	var entry string
	for deadline := time.Now().Add(20 * time.Second); ; {
		var ok bool
		res, ok = lockval.ParseReserved(get(a))
		m, err := client.Do(ctx, client.B().Zrange().Key(q).Min("0").Max("-1").Build()).AsStrSlice()
		if ok && err == nil && len(m) == 1 {
			entry = m[0]
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the waiting process never reserved a and stood in k's line")
		}
		time.Sleep(time.Millisecond)
	}
	x := lockval.QueueEntry(entry)
	if x.Token != res.Waiter || x.Seq < 1 || x.Inbox == "" {
		t.Fatalf("k's line entry %q is not a waiter by reservation's (token %s)", entry, res.Waiter)
	}
	if v := lockval.Parse(get(k)); !v.Shared || !v.Marked {
		t.Fatalf("k is %+v, want shared and marked", v)
	}
	_, err := e.locker(client, slotlock.Options{}).Acquire(ctx, slotlock.Request{Shared: []string{k}})
	var ce *slotlock.ConflictError
	if !errors.As(err, &ce) {
		t.Fatalf("a reader passed the waiting process: %v", err)
	}

	if err := readers[0].Release(ctx); err != nil {
		t.Fatal(err)
	}
	before := sysMonotonic()
	if err := readers[1].Release(ctx); err != nil {
		t.Fatal(err)
	}
	after := get(k)
	if hr, ok := lockval.ParseReserved(after); ok {
		if hr.Waiter != res.Waiter || hr.Ticket != res.Ticket || hr.Inbox != x.Inbox || hr.Seq != x.Seq {
			t.Fatalf("k handed to %+v, want the waiting process's reservation (%s, ticket %d, inbox %s)", hr, res.Waiter, res.Ticket, x.Inbox)
		}
	} else if lockval.Holder(after) != res.Waiter {
		t.Fatalf("k after the last reader's release is %q: not handed to the waiting process (%s)", after, res.Waiter)
	}
	var granted contenderEvent
	for deadline := time.Now().Add(10 * time.Second); granted.Event == ""; {
		evs, perr := w.snapshot()
		if perr != "" {
			t.Fatalf("the waiting process: %s", perr)
		}
		for _, ev := range evs {
			if ev.Event == "granted" {
				granted = ev
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("the waiting process was not granted after the last reader left")
		}
		time.Sleep(time.Millisecond)
	}
	if granted.Token != res.Waiter {
		t.Fatalf("granted lease %s, the reservations named %s", granted.Token, res.Waiter)
	}
	if granted.From < before {
		t.Fatalf("the waiting process was granted %.3f ms before the last reader's release", ms(before-granted.From))
	}
	// Held: a lease holds its keys from its grant.
	if v := get(k); !lockval.HeldBy(v, res.Waiter) {
		t.Fatalf("k is %q, not held by the granted process", v)
	}
	w.stop(10 * time.Second)
	// The process exits holding its lease: it expires within its TTL.
	e.requireUnlocked(ttl + 2*lockval.EntryTTL + time.Second)
}

// TestRequestYieldsToAWaiterByReservationInAnotherProcess: a request
// with shared keys waits behind a writer by reservation in another OS
// process, as replicas of a service meet, holding nothing. A reader here
// holds b shared; a contender process locks b and waits by reservation in
// b's line; a request here for x (before b in canonical order) exclusive
// and b shared finds the process's entry before it in b's line, and waits
// by reservation: x is its reservation, never its hold, and it stands in
// b's line behind the writer as a reader. Once the reader leaves, the
// process is granted, releases, and the request gets both. Mutation:
// writer_before always false (the request joins the reader before the
// process's writer).
func TestRequestYieldsToAWaiterByReservationInAnotherProcess(t *testing.T) {
	e := newEnv(t, 2*time.Minute)
	e.waitReady()
	client := e.client()
	ctx := e.ctx
	names := make([]string, 16)
	for i := range names {
		names[i] = "ryx:" + strconv.Itoa(i)
	}
	sorted := slot.Sorted(names)
	x, b := sorted[0].Name, sorted[len(sorted)-1].Name
	get := func(key string) string { return e.lockValue(ctx, client, key) }
	line := func() []string {
		q := e.names.QueueKeyInSlot(b, slot.KeySlot(b))
		m, err := client.Do(ctx, client.B().Zrange().Key(q).Min("0").Max("-1").Build()).AsStrSlice()
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	until := func(what string, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); !ok(); {
			if time.Now().After(deadline) {
				t.Fatal(what)
			}
			time.Sleep(time.Millisecond)
		}
	}
	reader, err := e.locker(client, slotlock.Options{TTL: 30 * time.Second}).Acquire(ctx, slotlock.Request{Shared: []string{b}})
	if err != nil {
		t.Fatal(err)
	}
	w := startContender(t, contenderSpec{Addrs: e.c.Addrs(), Prefix: e.prefix, TTL: 5 * time.Second,
		Keys: []string{b}, Release: true, Hold: 10 * time.Millisecond})
	until("the contender process never stood in b's line by reservation", func() bool {
		m := line()
		return len(m) == 1 && strings.Contains(m[0], " ")
	})

	done := make(chan error, 1)
	go func() {
		l, err := e.locker(client, slotlock.Options{TTL: 30 * time.Second}).Acquire(ctx,
			slotlock.Request{Exclusive: []string{x}, Shared: []string{b}, Wait: slotlock.WaitForever})
		if err == nil {
			err = l.Release(ctx)
		}
		done <- err
	}()
	until("the request never stood in b's line", func() bool { return len(line()) == 2 })
	until("the request never reserved x", func() bool { return strings.HasPrefix(get(x), lockval.Reserve) })
	if m := line(); !lockval.QueueEntry(m[1]).Reader {
		t.Fatalf("the request is not a reader by reservation behind the process in b's line: %q", m)
	}
	select {
	case err := <-done:
		t.Fatalf("the request returned while b was the other process's to come: %v", err)
	default:
	}
	if err := reader.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("the request after the process: %v", err)
	}
	until("the contender process never reported holding b", func() bool {
		evs, perr := w.snapshot()
		if perr != "" {
			t.Fatalf("the contender process: %s", perr)
		}
		for _, ev := range evs {
			if ev.Event == "held" {
				return true
			}
		}
		return false
	})
	w.stop(10 * time.Second)
	e.requireUnlocked(time.Second)
}

// lockValue returns the value of user key's lock key ("" when there is
// none), read through client.
func (e *env) lockValue(ctx context.Context, client rueidis.Client, key string) string {
	e.t.Helper()
	v, err := client.Do(ctx, client.B().Get().Key(e.names.LockKey(key)).Build()).ToString()
	if rueidis.IsRedisNil(err) {
		return ""
	}
	if err != nil {
		e.t.Fatal(err)
	}
	return v
}
