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
	q := names.QueueKeyInSlot(key, slot.KeySlot(key))
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
			x := lockval.QueueEntry(m[0])
			require.True(t, x.Token == res.Waiter && x.Seq >= 1 && x.Inbox != "" && !x.Deadline.IsZero(), "W's entry in k's line is not a waiter by reservation's: %q", m[0])
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
				require.Equal(t, lockval.Reservation{Ticket: res.Ticket, Waiter: res.Waiter, Inbox: x.Inbox}, lockval.Reservation{Ticket: hr.Ticket, Waiter: hr.Waiter, Inbox: hr.Inbox},
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

// TestARequestWithSharedKeysWaitsByReservation: a request with shared
// keys waits as a plain Lock does: it holds nothing while it waits (its
// exclusive key x is its reservation, never held), stands in the line of
// a key reserved for an older waiter under a reader's entry (inbox, then
// lockval.QueueReader), and is granted by its confirm once that waiter is
// done. Mutation (checked while requests could still keep a prefix):
// requests with shared keys kept out of reservation (the entry was the
// bare token).
func TestARequestWithSharedKeysWaitsByReservation(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, 30*time.Second)
	x, a := firstAndLast("rp", 16)
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
		l, err := e.locker(opt).Acquire(ctx, slotlock.Request{Exclusive: []string{x}, Shared: []string{a}, Wait: slotlock.WaitForever})
		if err == nil {
			err = l.Release(ctx)
		}
		rDone <- err
	}()
	require.Eventually(t, func() bool { return e.queueLen(ctx, a) == 1 }, 10*time.Second, time.Millisecond)
	m := e.lineMembers(ctx, a)
	require.Len(t, m, 1)
	require.True(t, lockval.QueueEntry(m[0]).Reader && lockval.QueueEntry(m[0]).Inbox != "",
		"the request stands in a's line as a reader by reservation: %q", m[0])
	require.Eventually(t, func() bool {
		_, ok := lockval.ParseReserved(e.lockValue(ctx, x))
		return ok
	}, 10*time.Second, time.Millisecond, "x is the request's reservation")
	xv := e.lockValue(ctx, x)
	require.True(t, xv == "" || strings.HasPrefix(xv, lockval.Reserve), "x held while the request waits: %q", xv)
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
