package clustertest

import (
	"errors"
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
	// (docs/design.md, "With shared keys and permits"): two readers in
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
	get := func(key string) string {
		v, err := client.Do(ctx, client.B().Get().Key(e.names.LockKey(key)).Build()).ToString()
		if rueidis.IsRedisNil(err) {
			return ""
		}
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	w := startContender(t, contenderSpec{Addrs: e.c.Addrs(), Prefix: e.prefix, TTL: ttl, Keys: []string{a, k}})
	q, _ := e.names.QueueKeysInSlot(k, slot.KeySlot(k))
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
	inbox, ok := strings.CutPrefix(entry, res.Waiter+" ")
	if !ok || inbox == "" {
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
		if hr.Waiter != res.Waiter || hr.Ticket != res.Ticket || hr.Inbox != inbox {
			t.Fatalf("k handed to %+v, want the waiting process's reservation (%s, ticket %d, inbox %s)", hr, res.Waiter, res.Ticket, inbox)
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
	if v := get(k); lockval.Holder(v) != res.Waiter {
		t.Fatalf("k is %q, not held by the granted process", v)
	}
	w.stop(10 * time.Second)
	// The process exits holding its lease: it expires within its TTL.
	e.requireUnlocked(ttl + 2*lockval.EntryTTL + time.Second)
}
