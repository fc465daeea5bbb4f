package slotlock_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/slotlock/slotlock"
	"github.com/slotlock/slotlock/internal/lockval"
	"github.com/slotlock/slotlock/internal/protocol"
	"github.com/slotlock/slotlock/slot"
)

// Tests of waiting in line across Lockers (docs/design.md, "Waiting in
// line across processes"): a waiter joins the queue of the key it waits for, and a release
// of a marked key hands the key to the oldest live waiter as a
// reservation that only that waiter takes.

// withoutLines drops the line keys (P{T}#q:K, P{T}#q#p:R) of a lockKeys
// map: the lock keys alone.
func withoutLines(m map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range m {
		if !strings.Contains(k, "}#q") {
			out[k] = v
		}
	}
	return out
}

// queueLen returns how many waiters are in key's line.
func (e *env) queueLen(ctx context.Context, key string) int64 {
	e.t.Helper()
	names, err := slot.NewNamer(e.prefix)
	require.NoError(e.t, err)
	q := names.QueueKeyInSlot(key, slot.KeySlot(key))
	n, err := e.client.Do(ctx, e.client.B().Zcard().Key(q).Build()).AsInt64()
	require.NoError(e.t, err)
	return n
}

// lockValue returns key's lock value ("" when free).
func (e *env) lockValue(ctx context.Context, key string) string {
	e.t.Helper()
	names, err := slot.NewNamer(e.prefix)
	require.NoError(e.t, err)
	v, err := e.client.Do(ctx, e.client.B().Get().Key(names.LockKey(key)).Build()).ToString()
	if rueidis.IsRedisNil(err) {
		return ""
	}
	require.NoError(e.t, err)
	return v
}

// enqueueByHand puts a made-up waiter by reservation into key's line
// (waiter: its entry without the deadline, 'token/seq inbox'), with
// ticket µs (server time) and a deadline of deadlineMs (server time), as
// reserve.lua would, and marks the key.
func (e *env) enqueueByHand(ctx context.Context, key, waiter string, us, deadlineMs int64) {
	e.t.Helper()
	names, err := slot.NewNamer(e.prefix)
	require.NoError(e.t, err)
	q := names.QueueKeyInSlot(key, slot.KeySlot(key))
	e.entryByHand(ctx, q, waiter, us, deadlineMs)
	lk := names.LockKey(key)
	v, err := e.client.Do(ctx, e.client.B().Get().Key(lk).Build()).ToString()
	require.NoError(e.t, err)
	if !lockval.Marked(v) {
		require.NoError(e.t, e.client.Do(ctx, e.client.B().Set().Key(lk).Value(v+lockval.Mark).Keepttl().Build()).Error())
	}
}

// entryByHand writes entry ('token/seq inbox', the member without its
// deadline) into line q with ticket us and a deadline of deadlineMs
// (server time), the line living a minute.
func (e *env) entryByHand(ctx context.Context, q, entry string, us, deadlineMs int64) {
	e.t.Helper()
	member := fmt.Sprintf("%s %d", entry, deadlineMs)
	for _, cmd := range []rueidis.Completed{
		e.client.B().Zadd().Key(q).ScoreMember().ScoreMember(float64(us), member).Build(),
		e.client.B().Pexpire().Key(q).Milliseconds(60_000).Build(),
	} {
		require.NoError(e.t, e.client.Do(ctx, cmd).Error())
	}
}

// serverMs returns the time of the server that owns key, in ms.
func (e *env) serverMs(ctx context.Context, key string) int64 {
	e.t.Helper()
	node, err := e.c.NodeForSlot(ctx, slot.KeySlot(key))
	require.NoError(e.t, err)
	t, err := node.Do(ctx, "TIME").AsStrSlice()
	require.NoError(e.t, err)
	s, _ := strconv.ParseInt(t[0], 10, 64)
	us, _ := strconv.ParseInt(t[1], 10, 64)
	return s*1000 + us/1000
}

func TestReleaseHandsOffToTheOldestLiveWaiter(t *testing.T) {
	for _, m := range modes {
		for _, k := range []int{1, 3} { // release1.lua, release.lua
			t.Run(fmt.Sprintf("%s/K=%d", m.name, k), func(t *testing.T) {
				t.Parallel()
				e := newEnv(t)
				ctx := ctxT(t, 30*time.Second)
				keys := keysN("ho", k)
				l := e.locker(slotlock.Options{TTL: 30 * time.Second, PerSlot: m.perSlot})
				other := e.locker(slotlock.Options{TTL: 30 * time.Second, PerSlot: m.perSlot})
				lease, err := l.Lock(ctx, keys...)
				require.NoError(t, err)
				now := e.serverMs(ctx, keys[0])
				// Three made-up waiters on the first key: the oldest has
				// let its deadline pass (it is skipped and dropped), the
				// next is the one the key goes to, the youngest stays in
				// line.
				// Their inbox is heard (a release passes over a waiter
				// nobody hears), but they never come.
				names, _ := slot.NewNamer(e.prefix)
				inbox := names.InboxInSlot("madeup", slot.KeySlot(keys[0]))
				e.listen(ctx, inbox)
				entry := func(token string) string { return token + "/1 " + inbox }
				e.enqueueByHand(ctx, keys[0], entry("AAAAAAAAAAAAAAAAAAAAAA"), now*1000-3000, now-1)
				e.enqueueByHand(ctx, keys[0], entry("CCCCCCCCCCCCCCCCCCCCCC"), now*1000-2000, now+10_000)
				e.enqueueByHand(ctx, keys[0], entry("BBBBBBBBBBBBBBBBBBBBBB"), now*1000-1000, now+10_000)
				require.NoError(t, lease.Release(ctx))

				v := e.lockValue(ctx, keys[0])
				res, ok := lockval.ParseReserved(v)
				require.True(t, ok && res.Waiter == "CCCCCCCCCCCCCCCCCCCCCC" && lockval.Marked(v), "reserved for the oldest live waiter, marked (one more waits): %q", v)
				require.EqualValues(t, 1, e.queueLen(ctx, keys[0]), "the expired entry and the served one are gone")
				for _, key := range keys[1:] {
					require.Empty(t, e.lockValue(ctx, key), "an unmarked key is deleted")
				}
				// Nobody but that waiter takes a reserved key: not
				// TryLock, not a bare SET NX, not another Lock before the
				// reservation expires.
				_, err = other.TryLock(ctx, keys...)
				var ce *slotlock.ConflictError
				require.ErrorAs(t, err, &ce)
				require.LessOrEqual(t, ce.Conflicts[0].TTL, lockval.ReserveTTL)
				ok, err = e.client.Do(ctx, e.client.B().Set().Key(names.LockKey(keys[0])).Value("x").Nx().Build()).AsBool()
				require.True(t, rueidis.IsRedisNil(err) || err == nil && !ok, "SET NX took a reserved key: %v", err)
				// The waiters never come. The Lock waits by reservation
				// (a younger waiter than both made-up ones): the key is
				// C's until its reservation expires, then B's (a free
				// key goes to the oldest live waiter in line, B, whose
				// reservation expires in turn), then the Lock's. Each
				// waiter that never comes costs at most ReserveTTL, plus
				// one refresh of the Lock to see it (an expiry sends no
				// message).
				start := time.Now()
				lease2, err := other.Lock(ctx, keys...)
				require.NoError(t, err)
				waited := time.Since(start)
				require.Greater(t, waited, lockval.ReserveTTL, "the older waiter B had its turn")
				// At most 2*(ReserveTTL+QueuedRefresh) plus round
				// trips; bounded at about 5x that, far below the
				// context's 30 s (load delays refreshes).
				require.Less(t, waited, 10*(lockval.ReserveTTL+protocol.QueuedRefresh),
					"each reservation nobody takes blocks about ReserveTTL")
				require.EqualValues(t, 0, e.queueLen(ctx, keys[0]), "B was served, the Lock left the line")
				require.NoError(t, lease2.Release(ctx))
				require.Empty(t, e.lockValue(ctx, keys[0]))
			})
		}
	}
}

func TestFIFOAcrossLockers(t *testing.T) {
	// One hot key, a holder and eight waiters, each with a Locker and a
	// client of its own (as separate processes have: Lockers that share a
	// client share its subscriptions, and one's unsubscribe ends
	// another's, which leaves that one to its timer): they are granted in
	// the order they joined the line.
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			ctx := ctxT(t, 60*time.Second)
			const key = "fifo:1"
			opt := slotlock.Options{TTL: 30 * time.Second, PerSlot: m.perSlot}
			holder := e.locker(opt)
			h, err := holder.Lock(ctx, key)
			require.NoError(t, err)
			var mu sync.Mutex
			var order []int
			var wg sync.WaitGroup
			const n = 8
			for i := range n {
				l := newEnvOn(t, e.c).locker(opt) // same test, same prefix
				wg.Add(1)
				go func() {
					defer wg.Done()
					lease, err := l.Lock(ctx, key)
					if err != nil {
						t.Errorf("waiter %d: %v", i, err)
						return
					}
					mu.Lock()
					order = append(order, i)
					mu.Unlock()
					_ = lease.Release(ctx)
				}()
				// The next waiter starts once this one is in line.
				require.Eventually(t, func() bool { return e.queueLen(ctx, key) == int64(i+1) }, 10*time.Second, time.Millisecond)
			}
			require.NoError(t, h.Release(ctx))
			wg.Wait()
			require.Equal(t, []int{0, 1, 2, 3, 4, 5, 6, 7}, order)
			require.Empty(t, e.lockKeys(), "no lock, reservation or queue key is left")
		})
	}
}

func TestCancelWhileQueuedLeavesNothing(t *testing.T) {
	// A waiter by reservation, plain or reentrant, is cancelled. Nothing
	// of it is held, and it has left every line by the time Lock returns,
	// so the holder's release deletes the key (no reservation for a
	// waiter that is gone) and nothing is left. Its first attempt took
	// {cq}a (before the held {cq}b in the same slot): a plain waiter's
	// next round turned it into a reservation, a reentrant one released
	// it (its owner's form is not converted). Were the leave lost, the
	// entry would lapse within lockval.EntryTTL
	// (TestReleaseHandsOffToTheOldestLiveWaiter skips such an entry).
	// A request with shared keys (all but cq:a) is cancelled the same way.
	// Mutation: a reentrant waiter or a request that keeps its first
	// attempt's holds (holdNothing a no-op) leaves {cq}a held by its
	// owner, or shared in its name.
	for _, m := range modes {
		for _, kind := range []string{"plain", "reentrant", "shared"} {
			name := m.name + "/" + kind
			owner := ""
			if kind == "reentrant" {
				owner = "cq-owner"
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				e := newEnv(t)
				ctx := ctxT(t, 60*time.Second)
				keys := []string{"cq:a", "{cq}a", "{cq}b", "cq:c"}
				held := "{cq}b"
				opt := slotlock.Options{TTL: 30 * time.Second, PerSlot: m.perSlot}
				holder, waiter := e.locker(opt), e.locker(opt)
				h, err := holder.Lock(ctx, held)
				require.NoError(t, err)
				var token string
				waiter.SetAfterFailure(func(tok string, _ error) { token = tok })
				wctx, cancel := context.WithCancel(ctx)
				if owner != "" {
					wctx = slotlock.WithOwner(wctx, owner)
				}
				got := make(chan error, 1)
				go func() {
					var err error
					if kind == "shared" {
						_, err = waiter.Acquire(wctx, slotlock.Request{Exclusive: keys[:1], Shared: keys[1:], Wait: slotlock.WaitForever})
					} else {
						_, err = waiter.Lock(wctx, keys...)
					}
					got <- err
				}()
				require.Eventually(t, func() bool { return e.queueLen(ctx, held) == 1 }, 10*time.Second, time.Millisecond)
				joined := time.Now()
				cancel()
				err = <-got
				require.ErrorIs(t, err, context.Canceled)
				require.NotEmpty(t, token)
				for k, v := range e.lockKeys() {
					require.NotContains(t, k, "}#q", "the cancelled waiter is still in line")
					require.NotContains(t, v, token, "key %q still carries the cancelled waiter", k)
				}
				require.Less(t, time.Since(joined), lockval.EntryTTL, "checked before an entry could lapse")
				require.NoError(t, h.Release(ctx))
				require.Empty(t, e.lockKeys(), "nothing is left after a cancelled waiter")
			})
		}
	}
}

func TestReleaseWithoutChannelRights(t *testing.T) {
	// A user whose ACL grants no channel: the release of a marked key
	// still deletes it and reports success (the publish is protected; an
	// unprotected SPUBLISH failed the call after the DEL, and an error
	// reply would claim nothing was written).
	e := newEnv(t)
	ctx := ctxT(t, 30*time.Second)
	user := "nochan" + strconv.FormatInt(time.Now().UnixNano(), 36)
	for _, n := range e.c.Nodes() {
		require.NoError(t, n.Do(ctx, "ACL", "SETUSER", user, "on", ">pw", "~*", "+@all", "resetchannels").Error())
	}
	t.Cleanup(func() {
		for _, n := range e.c.Nodes() {
			_ = n.Do(context.Background(), "ACL", "DELUSER", user).Error()
		}
	})
	client, err := e.c.Client(func(o *rueidis.ClientOption) { o.Username, o.Password = user, "pw" })
	require.NoError(t, err)
	t.Cleanup(client.Close)
	for _, m := range modes {
		for _, k := range []int{1, 3} {
			t.Run(fmt.Sprintf("%s/K=%d", m.name, k), func(t *testing.T) {
				l, err := slotlock.New(client, slotlock.Options{Prefix: e.prefix, TTL: 30 * time.Second, PerSlot: m.perSlot})
				require.NoError(t, err)
				defer l.Close()
				keys := keysN(fmt.Sprintf("acl%s%d", m.name, k), k)
				lease, err := l.Lock(ctx, keys...)
				require.NoError(t, err)
				names, _ := slot.NewNamer(e.prefix)
				lk := names.LockKey(keys[0])
				require.NoError(t, e.client.Do(ctx, e.client.B().Set().Key(lk).Value(lease.Token()+lockval.Mark).Keepttl().Build()).Error())
				err = lease.Release(ctx)
				require.NoError(t, err)
				require.False(t, errors.Is(err, slotlock.ErrLeaseLost))
				for _, key := range keys {
					require.Empty(t, e.lockValue(ctx, key))
				}
			})
		}
	}
}

func TestYoungerWaiterYieldsToAnOlder(t *testing.T) {
	// Rule Y (cooperative wound-wait, docs/design.md, "Waiting by
	// reservation across processes"): a waiter by reservation that holds a key reserved
	// while it waits for another gives the reserved one to an older
	// waiter that asks, and waits for it again behind that one. Here the
	// older waiter is made up (a queue entry and the request on the
	// waiter's inbox, as reserve.lua writes and sends them) and never
	// comes: its reservation lapses within ReserveTTL and the key comes
	// back to the real waiter, which is granted once the holder of its
	// other key lets go. Only per-node calls: per-slot calls cannot
	// publish to an inbox of another slot, and their waiters yield at
	// their refresh.
	e := newEnv(t)
	ctx := ctxT(t, 30*time.Second)
	keys := []string{"yield:a", "yield:b"}
	opt := slotlock.Options{TTL: 30 * time.Second}
	holder, waiter := e.locker(opt), e.locker(opt)
	h, err := holder.Lock(ctx, keys[1])
	require.NoError(t, err)
	got := make(chan error, 1)
	go func() {
		lease, err := waiter.Lock(ctx, keys...)
		if err == nil {
			err = lease.Release(ctx)
		}
		got <- err
	}()

	// The waiter reserved a and stands in b's line.
	var res lockval.Reservation
	require.Eventually(t, func() bool {
		var ok bool
		res, ok = lockval.ParseReserved(e.lockValue(ctx, keys[0]))
		return ok && e.queueLen(ctx, keys[1]) == 1
	}, 10*time.Second, time.Millisecond)

	names, err := slot.NewNamer(e.prefix)
	require.NoError(t, err)
	la := names.LockKey(keys[0])
	// Nobody else takes a reserved key: not TryLock of either strategy,
	// not a bare SET NX.
	for _, st := range []slotlock.Strategy{slotlock.StrategyLua, slotlock.StrategyPipeline} {
		_, err = e.locker(slotlock.Options{TTL: 30 * time.Second, Strategy: st}).TryLock(ctx, keys[0])
		var ce *slotlock.ConflictError
		require.ErrorAs(t, err, &ce, "strategy %d took a reserved key", st)
		require.LessOrEqual(t, ce.Conflicts[0].TTL, lockval.ReserveTTL)
	}
	ok, err := e.client.Do(ctx, e.client.B().Set().Key(la).Value("x").Nx().Build()).AsBool()
	require.True(t, rueidis.IsRedisNil(err) || err == nil && !ok, "SET NX took a reserved key: %v", err)

	q := names.QueueKeyInSlot(keys[0], slot.KeySlot(keys[0]))
	const old = "AAAAAAAAAAAAAAAAAAAAAA"
	oldInbox := names.InboxInSlot("older", slot.KeySlot(keys[0]))
	e.listen(ctx, oldInbox) // alive (a release would pass over a waiter nobody hears), it never comes
	now := e.serverMs(ctx, keys[0])
	e.entryByHand(ctx, q, old+" "+oldInbox, res.Ticket-1000, now+10_000)
	b := e.client.B()
	for _, cmd := range []rueidis.Completed{
		b.Set().Key(la).Value(lockval.FormatReserved(lockval.Reservation{Ticket: res.Ticket, Waiter: res.Waiter, Inbox: res.Inbox, Marked: true})).Xx().Keepttl().Build(),
		b.Spublish().Channel(res.Inbox).Message(lockval.Yield + la + " " + res.Waiter).Build(),
	} {
		require.NoError(t, e.client.Do(ctx, cmd).Error())
	}
	asked := time.Now()
	var yielded time.Duration
	require.Eventually(t, func() bool {
		r, ok := lockval.ParseReserved(e.lockValue(ctx, keys[0]))
		if ok && r.Waiter == old {
			yielded = time.Since(asked)
			require.Equal(t, res.Ticket-1000, r.Ticket, "the reservation carries the older waiter's ticket")
			require.Equal(t, oldInbox, r.Inbox)
			return true
		}
		return false
	}, 5*time.Second, time.Millisecond, "the younger waiter never yielded")
	t.Logf("yielded %v after the request", yielded)
	require.EqualValues(t, 1, e.queueLen(ctx, keys[0]), "the waiter waits for a again, behind the older one")

	// The older waiter never comes; the holder of b lets go. The waiter
	// is granted once the made-up reservation lapses.
	require.NoError(t, h.Release(ctx))
	select {
	case err := <-got:
		require.NoError(t, err)
	case <-time.After(10 * (lockval.ReserveTTL + 2*protocol.QueuedRefresh)):
		// Expected within ReserveTTL+2*QueuedRefresh plus round trips;
		// 10x that (13 s), below the context's 30 s: load delays
		// refreshes, a reservation that never lapses blocks for good.
		t.Fatal("the waiter was not granted after the older waiter's reservation lapsed")
	}
}

func TestPrefixWaiterGivesBackItsPrefixBeforeAReservation(t *testing.T) {
	// A waiter that keeps a canonical prefix (here the pipeline
	// strategy's) must not hold keys while it waits for a key reserved
	// for a waiter by reservation: that waiter may be waiting for its
	// prefix, and it yields only to older waiters by reservation, so the
	// two would wait for each other until a timeout. Here the Lua waiter
	// W has reserved a and waits for b; the pipeline Lock of x and a
	// (x before a in canonical order) takes x, meets a's reservation and
	// gives x back; both are granted once b's holder lets go.
	e := newEnv(t)
	ctx := ctxT(t, 30*time.Second)
	names, err := slot.NewNamer(e.prefix)
	require.NoError(t, err)
	var x, a string
	for _, k := range slot.Sorted(keysN("pg", 16)) { // the first and the last in canonical order
		if x == "" {
			x = k.Name
		}
		a = k.Name
	}
	b := "pg:held"
	holder := e.locker(slotlock.Options{TTL: 30 * time.Second})
	w := e.locker(slotlock.Options{TTL: 30 * time.Second})
	p := e.locker(slotlock.Options{TTL: 30 * time.Second, Strategy: slotlock.StrategyPipeline})
	h, err := holder.Lock(ctx, b)
	require.NoError(t, err)
	wDone := make(chan error, 1)
	go func() {
		lease, err := w.Lock(ctx, a, b)
		if err == nil {
			err = lease.Release(ctx)
		}
		wDone <- err
	}()
	require.Eventually(t, func() bool {
		_, ok := lockval.ParseReserved(e.lockValue(ctx, a))
		return ok && e.queueLen(ctx, b) == 1
	}, 10*time.Second, time.Millisecond, "W reserved a and waits for b")

	pDone := make(chan error, 1)
	go func() {
		lease, err := p.Lock(ctx, x, a)
		if err == nil {
			err = lease.Release(ctx)
		}
		pDone <- err
	}()
	// The pipeline waiter attempts (taking x), meets a's reservation and
	// gives x back. Seen from outside: x is free again while a is still
	// W's reservation, and stays free until W is done.
	lx := names.LockKey(x)
	took := false
	require.Eventually(t, func() bool {
		v, err := e.client.Do(ctx, e.client.B().Get().Key(lx).Build()).ToString()
		if err == nil && v != "" {
			took = true // the pipeline waiter's prefix
			return false
		}
		return took && rueidis.IsRedisNil(err)
	}, 10*time.Second, time.Millisecond, "the pipeline waiter kept x while a was reserved")
	// It polls (a pipeline waiter has no message), and each poll takes x
	// for the round trip before its trim: x may be seen held now and
	// then, but not at every sample, as it would be if the waiter kept
	// its prefix.
	free := 0
	const samples = 50
	for range samples {
		select {
		case err := <-pDone:
			t.Fatalf("the pipeline Lock returned while a was reserved: %v", err)
		default:
		}
		if e.lockValue(ctx, x) == "" {
			free++
		}
		time.Sleep(5 * time.Millisecond) // sampling x while W waits, not an ordering
	}
	// At least once, not most of the time: how long each poll's round
	// trip holds x is the machine's load. A waiter that kept its prefix
	// holds x at every sample.
	require.Positive(t, free, "the pipeline waiter kept x while a stayed reserved")
	require.NoError(t, h.Release(ctx))
	require.NoError(t, <-wDone)
	require.NoError(t, <-pDone)
	require.Empty(t, e.lockKeys())
}

func TestConfirmKeepsTheMarkWhileOthersWait(t *testing.T) {
	// Two waiters by reservation stand in line for keys the test holds.
	// The release hands every key to the older, marked (the younger still
	// waits). The older is granted by its confirm (fenced or not), which
	// takes the keys from the reservation's mark alone (acquire.lua mode
	// 'c' reads no queue for a key reserved for it), so its grant must
	// stay marked, or its release would delete the keys and the younger
	// would wait for its refresh. The younger's grant, with nobody left in
	// line, is unmarked.
	for _, fenced := range []bool{true, false} {
		t.Run(fmt.Sprintf("fenced=%v", fenced), func(t *testing.T) {
			e := newEnv(t)
			ctx := ctxT(t, 30*time.Second)
			keys := keysN("mk", 3)
			opt := slotlock.Options{TTL: 30 * time.Second, Fencing: fenced}
			h, err := e.locker(opt).Lock(ctx, keys...)
			require.NoError(t, err)
			leases := make([]chan *slotlock.Lease, 2)
			for i := range leases {
				leases[i] = make(chan *slotlock.Lease, 1)
				l := newEnvOn(t, e.c).locker(opt) // same test, same prefix; a client of its own
				go func() {
					lease, err := l.Lock(ctx, keys...)
					if err != nil {
						t.Errorf("waiter %d: %v", i, err)
						close(leases[i])
						return
					}
					leases[i] <- lease
				}()
				require.Eventually(t, func() bool {
					for _, k := range keys {
						if e.queueLen(ctx, k) != int64(i+1) {
							return false
						}
					}
					return true
				}, 10*time.Second, time.Millisecond, "waiter %d stands in every line", i)
			}
			require.NoError(t, h.Release(ctx))
			older := <-leases[0]
			require.NotNil(t, older)
			for _, k := range keys {
				v := e.lockValue(ctx, k)
				require.True(t, lockval.Holder(v) == older.Token() && lockval.Marked(v), "key %s: %q, want the older's grant, marked", k, v)
			}
			require.NoError(t, older.Release(ctx))
			younger := <-leases[1]
			require.NotNil(t, younger)
			for _, k := range keys {
				v := e.lockValue(ctx, k)
				require.True(t, lockval.Holder(v) == younger.Token() && !lockval.Marked(v), "key %s: %q: nobody waits, the grant is unmarked", k, v)
				require.EqualValues(t, 0, e.queueLen(ctx, k))
			}
			require.NoError(t, younger.Release(ctx))
		})
	}
}
