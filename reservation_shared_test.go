package slotlock_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/slotlock/slotlock"
	"github.com/slotlock/slotlock/internal/lockval"
	"github.com/slotlock/slotlock/slot"
)

// Waiting by reservation (issue 15) beside shared keys and permits (issue
// 17): docs/design.md, "Waiting by reservation across processes", the
// paragraph on shared keys. The Lockers here share the test's client but
// not an in-process queue (requests skip it anyway): they meet only in
// Redis. Separate OS processes, as replicas of a service: cluster_test's
// TestSharedKeyHandedToAWaiterByReservationInAnotherProcess and
// TestRequestYieldsToAWaiterByReservationInAnotherProcess.

// lineMembers returns the members of key's line, oldest first.
func (e *env) lineMembers(ctx context.Context, key string) []string {
	e.t.Helper()
	names, err := slot.NewNamer(e.prefix)
	require.NoError(e.t, err)
	q, _ := names.QueueKeysInSlot(key, slot.KeySlot(key))
	m, err := e.client.Do(ctx, e.client.B().Zrange().Key(q).Min("0").Max("-1").Build()).AsStrSlice()
	require.NoError(e.t, err)
	return m
}

// reservedAndInLine waits until key reserved is a waiter by reservation's
// reservation and one waiter stands in key lined's line, and returns the
// reservation.
func (e *env) reservedAndInLine(ctx context.Context, reserved, lined string) lockval.Reservation {
	e.t.Helper()
	var res lockval.Reservation
	require.Eventually(e.t, func() bool {
		var ok bool
		res, ok = lockval.ParseReserved(e.lockValue(ctx, reserved))
		return ok && e.queueLen(ctx, lined) == 1
	}, 10*time.Second, time.Millisecond, "no waiter reserved %q and stood in %q's line", reserved, lined)
	return res
}

// TestReservationWaiterMeetsSharedKey: a plain exclusive Lock that waits by
// reservation and meets a shared key (one reader: '~token'; two: '~' and
// the holders set) stands in the key's line, marked, holding no key but
// its reservations; readers that come after it are refused (writer
// preference holds for it as for a waiter in line); the last reader's
// release hands the key to it (hand_off with an inbox entry: the key
// becomes its reservation, named by ticket, token and inbox) and it is
// granted. Mutations: shared_release.lua deleting the key instead of
// hand_off when it is marked (the value after the last release is "",
// not the waiter's); hand_off writing the old '^member' form for an inbox
// entry (the value does not parse as the waiter's reservation).
func TestReservationWaiterMeetsSharedKey(t *testing.T) {
	for _, readers := range []int{1, 2} {
		t.Run(map[int]string{1: "one reader", 2: "two readers"}[readers], func(t *testing.T) {
			e := newEnv(t)
			ctx := ctxT(t, 30*time.Second)
			opt := slotlock.Options{TTL: 30 * time.Second}
			const k, a = "rs:shared", "rs:free"
			var rs []*slotlock.Lease
			for range readers {
				r, err := e.locker(opt).Acquire(ctx, slotlock.Request{Shared: []string{k}})
				require.NoError(t, err)
				rs = append(rs, r)
			}
			v := lockval.Parse(e.lockValue(ctx, k))
			require.True(t, v.Shared, "k is held shared")
			require.Equal(t, readers == 1, v.Holder != "", "one reader is inline, two are in the set form")

			w := e.locker(opt)
			got := make(chan *slotlock.Lease, 1)
			errc := make(chan error, 1)
			go func() {
				l, err := w.Lock(ctx, a, k)
				if err != nil {
					errc <- err
					return
				}
				got <- l
			}()

			// W reserved the free key and stands in k's line by its
			// inbox entry; k stays shared, now marked.
			res := e.reservedAndInLine(ctx, a, k)
			m := e.lineMembers(ctx, k)
			require.Len(t, m, 1)
			// A waiter by reservation's entry: its token, '/', the round
			// that created it, a space and its inbox on k's node (another
			// node's than a's, maybe).
			tok, seq, inbox := lockval.QueueEntry(m[0])
			require.True(t, tok == res.Waiter && seq >= 1 && inbox != "", "W's entry in k's line is not a waiter by reservation's: %q", m[0])
			kv := e.lockValue(ctx, k)
			v = lockval.Parse(kv)
			require.True(t, v.Shared && v.Marked, "k is shared and marked: %q", kv)

			// Writer preference: a reader that comes now is refused, with
			// or without a wait, while W waits.
			var ce *slotlock.ConflictError
			_, err := e.locker(opt).Acquire(ctx, slotlock.Request{Shared: []string{k}})
			require.ErrorAs(t, err, &ce, "a reader passed a writer waiting by reservation")
			_, err = e.locker(opt).Acquire(ctx, slotlock.Request{Shared: []string{k}, Wait: 300 * time.Millisecond})
			require.ErrorIs(t, err, slotlock.ErrNotAcquired, "a waiting reader passed a writer waiting by reservation")
			select {
			case <-got:
				t.Fatal("W was granted while readers held k")
			case err := <-errc:
				t.Fatalf("W failed: %v", err)
			default:
			}

			for _, r := range rs[:len(rs)-1] {
				require.NoError(t, r.Release(ctx))
				require.True(t, lockval.Parse(e.lockValue(ctx, k)).Shared, "k stays shared while a reader holds it")
			}
			// The last reader's release hands k to W: right after it, k
			// is W's reservation (by ticket, token and inbox), or already
			// W's own once its confirm came.
			require.NoError(t, rs[len(rs)-1].Release(ctx))
			after := e.lockValue(ctx, k)
			if hr, ok := lockval.ParseReserved(after); ok {
				require.Equal(t, lockval.Reservation{Ticket: res.Ticket, Waiter: res.Waiter, Inbox: inbox}, lockval.Reservation{Ticket: hr.Ticket, Waiter: hr.Waiter, Inbox: hr.Inbox},
					"k handed to W's reservation: %q", after)
			} else {
				require.Equal(t, res.Waiter, lockval.Holder(after), "k after the last reader's release: %q", after)
			}
			var l *slotlock.Lease
			select {
			case l = <-got:
			case err := <-errc:
				t.Fatalf("W failed: %v", err)
			case <-ctx.Done():
				t.Fatal("W was not granted after the last reader left")
			}
			// Held: a lease holds its keys from its grant.
			require.True(t, lockval.HeldBy(e.lockValue(ctx, k), res.Waiter), "W holds k")
			require.True(t, lockval.HeldBy(e.lockValue(ctx, a), res.Waiter), "W holds a")
			require.Empty(t, e.lineMembers(ctx, k), "W left k's line")
			require.NoError(t, l.Release(ctx))
			require.Empty(t, e.lockKeys())
		})
	}
}

// TestRequestWaiterKeepsThePrefixProtocol: a request with shared keys
// waits keeping a prefix (it stands in a line by its token, never
// reserves), and gives that prefix back before a key reserved for a
// waiter by reservation, which may be waiting for the prefix.
// shared_acquire.lua reports such a key as reserved (a negated position)
// for that. Mutations: shared_acquire.lua reporting the position
// unnegated (the reader keeps x while a stays reserved); Engine.Queues
// without set.Plain() (the request reserves: its entry carries an inbox).
func TestRequestWaiterKeepsThePrefixProtocol(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, 30*time.Second)
	var x, a string
	for _, k := range slot.Sorted(keysN("rp", 16)) { // the first and the last in canonical order
		if x == "" {
			x = k.Name
		}
		a = k.Name
	}
	const b = "rp:held"
	opt := slotlock.Options{TTL: 30 * time.Second}
	h, err := e.locker(opt).Lock(ctx, b)
	require.NoError(t, err)
	wDone := make(chan error, 1)
	go func() {
		l, err := e.locker(opt).Lock(ctx, a, b)
		if err == nil {
			err = l.Release(ctx)
		}
		wDone <- err
	}()
	res := e.reservedAndInLine(ctx, a, b) // W reserved a and waits for b

	rDone := make(chan error, 1)
	go func() {
		l, err := e.locker(opt).Acquire(ctx, slotlock.Request{Shared: []string{x, a}, Wait: slotlock.WaitForever})
		if err == nil {
			err = l.Release(ctx)
		}
		rDone <- err
	}()
	// The reader stands in a's line behind W, by its token alone: it
	// waits in line, not by reservation.
	require.Eventually(t, func() bool { return e.queueLen(ctx, a) == 1 }, 10*time.Second, time.Millisecond)
	m := e.lineMembers(ctx, a)
	require.Len(t, m, 1)
	require.NotContains(t, m[0], " ", "a request with shared keys waits by reservation: %q", m[0])
	// x is the reader's prefix at each attempt, given back before it
	// waits for a's reservation: free between its attempts while a stays
	// W's.
	free := 0
	const samples = 50
	for range samples {
		select {
		case err := <-rDone:
			t.Fatalf("the reader returned while a was reserved: %v", err)
		default:
		}
		xv := e.lockValue(ctx, x)
		require.False(t, strings.HasPrefix(xv, lockval.Reserve), "x reserved by the request: %q", xv)
		if xv == "" {
			free++
		}
		time.Sleep(5 * time.Millisecond) // sampling x while W waits, not an ordering
	}
	// At least once, not most of the time: how long each attempt's round
	// trip holds x is the machine's load. A reader that kept its prefix
	// holds x at every sample.
	require.Positive(t, free, "the reader kept its prefix x while a stayed reserved")
	require.Equal(t, res.Waiter, lockval.Parse(e.lockValue(ctx, a)).Waiter, "a stayed W's reservation")
	require.NoError(t, h.Release(ctx))
	require.NoError(t, <-wDone)
	require.NoError(t, <-rDone)
	require.Empty(t, e.lockKeys())
}

// firstAndLast returns the first and the last of n keys named after base,
// in canonical order: a request holds the first as its prefix while it
// waits for the last.
func firstAndLast(base string, n int) (first, last string) {
	for _, k := range slot.Sorted(keysN(base, n)) {
		if first == "" {
			first = k.Name
		}
		last = k.Name
	}
	return first, last
}

// A request that finds a shared key with a waiter by reservation before
// it in the key's line (writer preference) gives its prefix back before
// it waits: that waiter holds no key, and may wait for the prefix
// (shared_acquire.lua reports the key as reserved). Before, the request
// kept its prefix for a third of its TTL per wait: in the fault suite's
// mixed workloads, plain Locks by reservation and requests stalled each
// other to a few grants a second (docs/faults.md). Mutation: line_ahead
// never saying "by reservation" (x stays the request's).
func TestPrefixWaiterYieldsBehindReservationWaiter(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, 30*time.Second)
	x, b := firstAndLast("yb", 16)
	opt := slotlock.Options{TTL: 30 * time.Second}
	reader, err := e.locker(opt).Acquire(ctx, slotlock.Request{Shared: []string{b}})
	require.NoError(t, err)
	wDone := make(chan error, 1)
	go func() {
		l, err := e.locker(opt).Lock(ctx, b) // waits by reservation, in b's line
		if err == nil {
			err = l.Release(ctx)
		}
		wDone <- err
	}()
	require.Eventually(t, func() bool { return e.queueLen(ctx, b) == 1 }, 10*time.Second, time.Millisecond)
	require.Contains(t, e.lineMembers(ctx, b)[0], " ", "the writer waits by reservation")

	rDone := make(chan error, 1)
	go func() {
		l, err := e.locker(opt).Acquire(ctx, slotlock.Request{Exclusive: []string{x}, Shared: []string{b}, Wait: slotlock.WaitForever})
		if err == nil {
			err = l.Release(ctx)
		}
		rDone <- err
	}()
	require.Eventually(t, func() bool { return e.queueLen(ctx, b) == 2 }, 10*time.Second, time.Millisecond, "the request stands in b's line")
	// Its attempt took x first; it gives x back before it waits (the
	// trim runs beside the wait), and holds nothing while it waits.
	require.Eventually(t, func() bool { return e.lockValue(ctx, x) == "" }, 3*time.Second, time.Millisecond,
		"the request kept its prefix x behind a waiter by reservation")
	select {
	case err := <-rDone:
		t.Fatalf("the request returned while b was the writer's to come: %v", err)
	default:
	}
	require.NoError(t, reader.Release(ctx)) // b goes to the writer, then to the request
	require.NoError(t, <-wDone)
	require.NoError(t, <-rDone)
	require.Empty(t, e.lockKeys())
}

// A request waiting in a key's line, its prefix held, whose key a release
// then hands to a waiter by reservation standing before it (an older
// ticket), gives its prefix back at its next join instead of at the end
// of its wait (a third of its TTL): join.lua says the key is reserved for
// another. The waiter by reservation is written into the line by hand
// here (an entry 'token inbox' with an old ticket, its reservation renewed
// by hand), as a waiter whose ticket is older than the request's place
// joins before it. Mutation:
// the waker ignoring join.lua's "reserved" (x stays the request's for 10
// s).
func TestPrefixWaiterYieldsWhenItsKeyIsReserved(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, 30*time.Second)
	x, b := firstAndLast("yr", 16)
	opt := slotlock.Options{TTL: 30 * time.Second}
	h, err := e.locker(opt).Lock(ctx, b)
	require.NoError(t, err)
	rDone := make(chan error, 1)
	go func() {
		l, err := e.locker(opt).Acquire(ctx, slotlock.Request{Exclusive: []string{x}, Shared: []string{b}, Wait: slotlock.WaitForever})
		if err == nil {
			err = l.Release(ctx)
		}
		rDone <- err
	}()
	require.Eventually(t, func() bool { return e.queueLen(ctx, b) == 1 && e.lockValue(ctx, x) != "" }, 10*time.Second, time.Millisecond,
		"the request holds x and waits in b's line")

	names, err := slot.NewNamer(e.prefix)
	require.NoError(t, err)
	s := slot.KeySlot(b)
	q, qd := names.QueueKeysInSlot(b, s)
	entry := "older-waiter " + names.InboxInSlot("older", s)
	e.listen(ctx, names.InboxInSlot("older", s)) // alive: a release passes over a waiter nobody hears
	require.NoError(t, e.client.Do(ctx, e.client.B().Zadd().Key(q).ScoreMember().ScoreMember(1, entry).Build()).Error())
	require.NoError(t, e.client.Do(ctx, e.client.B().Zadd().Key(qd).ScoreMember().ScoreMember(99999999999999, entry).Build()).Error())
	require.NoError(t, h.Release(ctx)) // hands b to the older waiter, which never comes
	res, ok := lockval.ParseReserved(e.lockValue(ctx, b))
	require.True(t, ok, "b is reserved")
	require.Equal(t, "older-waiter", res.Waiter)
	// The older waiter renews its reservation while it waits, as a live
	// one does (a third of ReserveTTL), until the request lets x go.
	lock := names.LockKey(b)
	require.Eventually(t, func() bool {
		_ = e.client.Do(ctx, e.client.B().Pexpire().Key(lock).Milliseconds(lockval.ReserveTTL.Milliseconds()).Build()).Error()
		return e.lockValue(ctx, x) == ""
	}, 3*time.Second, lockval.ReserveTTL/5, "the request kept its prefix x while b was reserved for an older waiter")
	// The reservation lapses (ReserveTTL); the request then takes both.
	require.NoError(t, <-rDone)
	require.Empty(t, e.lockKeys())
}
