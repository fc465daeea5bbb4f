package slotlock_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/slotlock/slotlock"
	"github.com/slotlock/slotlock/batch"
	"github.com/slotlock/slotlock/internal/lockval"
	"github.com/slotlock/slotlock/internal/protocol"
	"github.com/slotlock/slotlock/internal/topology"
	"github.com/slotlock/slotlock/slot"
)

// TestBareFirstAttempt covers the bare SET NX first attempt of a plain
// batch (batch.takeBare), on the engine directly: it takes free keys
// without any script, with the lease's token and TTL; it is not used
// before a script has run on the deployment, nor right after an
// acquisition met a held key; when it meets a held key, the keys it took stay
// reported as held (so the caller's rollback finds them), the held key is
// reported by the script with its holder's remaining time and is left
// alone, unmarked in either mode (a waiter marks a key when it joins its
// line, not at its first attempt); a key that
// already holds the lease's own token (a bare SET whose reply was lost)
// counts as taken.
func TestBareFirstAttempt(t *testing.T) {
	// Not parallel: it counts script calls on the masters.
	e := newEnv(t)
	ctx := ctxT(t, 60*time.Second)
	names, err := slot.NewNamer(e.prefix)
	require.NoError(t, err)
	scripts := func() int64 { return e.scriptCalls(ctx) }
	newSet := func(name string, n int) *protocol.Set {
		keys := make([]string, n)
		for i := range keys {
			keys[i] = fmt.Sprintf("%s:%d", name, i)
		}
		return protocol.NewSet(names, keys)
	}
	value := func(k string) (string, time.Duration) {
		v, err := e.client.Do(ctx, e.client.B().Get().Key(k).Build()).ToString()
		if rueidis.IsRedisNil(err) {
			return "", 0
		}
		require.NoError(t, err, k)
		pttl, err := e.client.Do(ctx, e.client.B().Pttl().Key(k).Build()).AsInt64()
		require.NoError(t, err, k)
		return v, time.Duration(pttl) * time.Millisecond
	}
	ttl := 20 * time.Second
	me := protocol.Who{Holder: "tok-me"}
	first := func(m protocol.Mode) protocol.AttemptOptions { return protocol.AttemptOptions{Mode: m, First: true} }
	allHeld := func(set *protocol.Set) []protocol.KeyState {
		st := make([]protocol.KeyState, set.Len())
		for i := range st {
			st[i] = protocol.Held
		}
		return st
	}
	release := func(eng *batch.Engine, set *protocol.Set) []int {
		lost, err := releaseOn(eng, ctx, set, nil, me)
		require.NoError(t, err)
		return lost
	}
	// freshEngine is an engine that has run no script yet.
	freshEngine := func() *batch.Engine {
		return batch.New(e.client, topology.New(e.client), batch.Options{})
	}

	// A fresh engine sends the script first, whatever First says: a server
	// that refuses scripts must say so at the lock.
	eng := freshEngine()
	warm := newSet("warm", 12)
	before := scripts()
	a := eng.Attempt(ctx, warm, 0, &protocol.Request{Who: me, TTL: ttl}, first(protocol.AllOrNothing))
	require.NoError(t, a.Err)
	require.Equal(t, allHeld(warm), a.State)
	require.Greater(t, scripts(), before, "the first acquisition of an engine runs the script")
	require.Empty(t, release(eng, warm))

	// Free keys: taken by the bare commands alone.
	free := newSet("free", 20)
	before = scripts()
	a = eng.Attempt(ctx, free, 0, &protocol.Request{Who: me, TTL: ttl}, first(protocol.AllOrNothing))
	require.NoError(t, a.Err)
	require.Equal(t, allHeld(free), a.State)
	require.Equal(t, before, scripts(), "free keys need no script")
	for _, k := range free.Lock {
		v, left := value(k)
		require.Equal(t, me.Holder, v, k)
		require.Greater(t, left, ttl-5*time.Second, k)
		require.LessOrEqual(t, left, ttl, k)
	}
	require.Empty(t, release(eng, free))

	// Not First (a retry, a waiter's next attempt): the script.
	again := newSet("again", 6)
	before = scripts()
	a = eng.Attempt(ctx, again, 0, &protocol.Request{Who: me, TTL: ttl}, protocol.AttemptOptions{Mode: protocol.AllOrNothing})
	require.NoError(t, a.Err)
	require.Equal(t, allHeld(again), a.State)
	require.Greater(t, scripts(), before)
	require.Empty(t, release(eng, again))

	// One key of the batch held by someone else, all or nothing.
	for _, tc := range []struct {
		mode protocol.Mode
	}{{protocol.AllOrNothing}, {protocol.Prefix}} {
		eng := freshEngine()
		require.NoError(t, eng.Attempt(ctx, newSet(fmt.Sprintf("prime%d", tc.mode), 1), 0, &protocol.Request{Who: me, TTL: ttl}, first(tc.mode)).Err)
		set := newSet(fmt.Sprintf("held%d", tc.mode), 20)
		mid := set.Len() / 2
		require.NoError(t, e.client.Do(ctx, e.client.B().Set().Key(set.Lock[mid]).Value("tok-other").Px(7*time.Second).Build()).Error())
		a := eng.Attempt(ctx, set, 0, &protocol.Request{Who: me, TTL: ttl}, first(tc.mode))
		require.NoError(t, a.Err)
		want := allHeld(set)
		want[mid] = protocol.NotHeld
		require.Equal(t, want, a.State, "the keys the bare commands took are reported held")
		require.Len(t, a.Conflicts, 1)
		require.Equal(t, mid, a.Conflicts[0].Index)
		require.Greater(t, a.Conflicts[0].TTL, 4*time.Second)
		require.LessOrEqual(t, a.Conflicts[0].TTL, 7*time.Second)
		v, left := value(set.Lock[mid])
		wantV := "tok-other" // unmarked: nobody stands in its line
		require.Equal(t, wantV, v)
		require.LessOrEqual(t, left, 7*time.Second, "the holder's expiry is untouched")
		for i, k := range set.Lock {
			if i != mid {
				v, _ := value(k)
				require.Equal(t, me.Holder, v, k)
			}
		}
		require.Equal(t, []int{mid}, release(eng, set), "rolled back: every key but the other's")
		for i, k := range set.Lock {
			v, _ := value(k)
			if i == mid {
				require.Equal(t, wantV, v)
			} else {
				require.Empty(t, v, k)
			}
		}

		// Right after a miss (which the protocol reports: Met), first
		// attempts go to the script.
		eng.Met(true)
		next := newSet(fmt.Sprintf("next%d", tc.mode), 8)
		before := scripts()
		a = eng.Attempt(ctx, next, 0, &protocol.Request{Who: me, TTL: ttl}, first(tc.mode))
		require.NoError(t, a.Err)
		require.Equal(t, allHeld(next), a.State)
		require.Greater(t, scripts(), before, "a miss sends the next first attempts to the script")
		require.Empty(t, release(eng, next))
	}

	// A key that already holds the lease's own token (a bare SET that
	// landed although its reply was lost), with a short expiry: the bare
	// SET finds it held, the script counts it as taken and renews it.
	eng = freshEngine()
	require.NoError(t, eng.Attempt(ctx, newSet("prime-own", 1), 0, &protocol.Request{Who: me, TTL: ttl}, first(protocol.AllOrNothing)).Err)
	own := newSet("own", 10)
	require.NoError(t, e.client.Do(ctx, e.client.B().Set().Key(own.Lock[3]).Value(me.Holder).Px(2*time.Second).Build()).Error())
	a = eng.Attempt(ctx, own, 0, &protocol.Request{Who: me, TTL: ttl}, first(protocol.AllOrNothing))
	require.NoError(t, a.Err)
	require.Equal(t, allHeld(own), a.State)
	require.Empty(t, a.Conflicts)
	v, left := value(own.Lock[3])
	require.Equal(t, me.Holder, v)
	require.Greater(t, left, 10*time.Second, "renewed to the TTL")
	require.Empty(t, release(eng, own))
}

// TestBareAttemptTrimmedWhileWaiting locks a batch whose middle key (in
// canonical order) another Locker holds, so that the first attempt's bare
// commands take the keys on both sides of it. While it waits, the lease
// must hold none of them: the holds its bare commands took become its
// reservations (reserve.lua), which nobody else takes but which expire
// by themselves within lockval.ReserveTTL of its last refresh, and it
// stands in the middle key's line (a waiter that held keys while it
// waited could deadlock with another, docs/design.md, "Waiting by
// reservation across processes"); once the holder lets go, it gets every key.
func TestBareAttemptTrimmedWhileWaiting(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := ctxT(t, 30*time.Second)
	names, err := slot.NewNamer(e.prefix)
	require.NoError(t, err)
	l := e.locker(slotlock.Options{TTL: 20 * time.Second})
	other := e.locker(slotlock.Options{TTL: 20 * time.Second})

	// A lease first, so that the Locker has run a script and the next
	// acquisition's first attempt is bare.
	prime, err := l.Lock(ctx, "prime:1", "prime:2")
	require.NoError(t, err)
	require.NoError(t, prime.Release(ctx))

	keys := keysN("trim", 24)
	set := protocol.NewSet(names, keys)
	mid := set.Len() / 2
	held, err := other.Lock(ctx, set.Keys[mid].Name)
	require.NoError(t, err)

	type result struct {
		lease *slotlock.Lease
		err   error
	}
	got := make(chan result, 1)
	go func() {
		lease, err := l.Lock(ctx, keys...)
		got <- result{lease, err}
	}()
	var waiter string
	require.Eventually(t, func() bool {
		locked := withoutLines(e.lockKeys()) // the waiter is in line too
		if len(locked) != set.Len() || e.queueLen(ctx, set.Keys[mid].Name) != 1 {
			return false
		}
		for i, k := range set.Lock {
			if i == mid {
				continue
			}
			r, ok := lockval.ParseReserved(locked[k])
			if !ok || waiter != "" && r.Waiter != waiter {
				return false
			}
			waiter = r.Waiter
		}
		v := locked[set.Lock[mid]]
		return len(v) > 0 && v[len(v)-1] == '!'
	}, 10*time.Second, time.Millisecond, "waiting, the lease holds no key: the others are reserved for it, and it is in the middle key's line")
	select {
	case r := <-got:
		t.Fatalf("Lock returned while the key was held: %v", r.err)
	default:
	}

	require.NoError(t, held.Release(ctx))
	r := <-got
	require.NoError(t, r.err)
	locked := e.lockKeys()
	require.Len(t, locked, len(keys))
	require.Equal(t, r.lease.Token(), waiter, "the reservations were the lease's")
	for _, k := range set.Lock {
		// Held: a lease holds its keys from its grant.
		require.True(t, lockval.HeldBy(locked[k], r.lease.Token()), "the lease holds %s: %q", k, locked[k])
	}
	require.NoError(t, r.lease.Release(ctx))
	require.Empty(t, e.lockKeys())
}
