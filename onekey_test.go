package slotlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/slotlock/slotlock/batch"
	"github.com/slotlock/slotlock/internal/protocol"
	"github.com/slotlock/slotlock/internal/topology"
	"github.com/slotlock/slotlock/slot"
)

// oneKeyRig returns the test's env and context, an engine of its own over
// the env's client, and a function that makes the Set of one key (or of
// several) under the env's prefix.
func oneKeyRig(t *testing.T) (*env, context.Context, *batch.Engine, func(keys ...string) *protocol.Set) {
	e := newEnv(t)
	names, err := slot.NewNamer(e.prefix)
	require.NoError(t, err)
	eng := batch.New(e.client, topology.New(e.client), batch.Options{})
	return e, ctxT(t, 30*time.Second), eng, func(keys ...string) *protocol.Set { return protocol.NewSet(names, keys) }
}

// TestOneKeyFallsBackToTheScript covers what the bare SET NX of a one-key
// plain lease (batch.takeBare) does not settle by itself, on the engine
// directly: a key that already holds the lease's own token (a SET that
// landed although its reply was lost, then a retry) counts as taken and
// keeps its value; a key held by another lease is reported as a conflict
// with its remaining time and is left alone; a free key is taken with the
// lease's token and the TTL asked for.
func TestOneKeyFallsBackToTheScript(t *testing.T) {
	t.Parallel()
	e, ctx, eng, one := oneKeyRig(t)
	ttl := 20 * time.Second
	opt := protocol.AttemptOptions{Mode: protocol.AllOrNothing}
	me := protocol.Who{Holder: "tok-me"}
	get := func(k string) (string, time.Duration) {
		v, err := e.client.Do(ctx, e.client.B().Get().Key(k).Build()).ToString()
		require.NoError(t, err, k)
		pttl, err := e.client.Do(ctx, e.client.B().Pttl().Key(k).Build()).AsInt64()
		require.NoError(t, err, k)
		return v, time.Duration(pttl) * time.Millisecond
	}

	// Before any script has run the engine sends the script; after it,
	// the bare SET. Both must take a free key the same way.
	for _, key := range []string{"free:first", "free:second"} {
		set := one(key)
		a := eng.Attempt(ctx, set, 0, &protocol.Request{Who: me, TTL: ttl}, opt)
		require.NoError(t, a.Err)
		require.Equal(t, []protocol.KeyState{protocol.Held}, a.State, key)
		v, left := get(set.Lock[0])
		require.Equal(t, me.Holder, v, key)
		require.Greater(t, left, ttl-5*time.Second, key)
		require.LessOrEqual(t, left, ttl, key)
	}

	// The lease's own token already there, with a short expiry: taken,
	// value unchanged, expiry moved up to the TTL.
	mine := one("mine")
	require.NoError(t, e.client.Do(ctx, e.client.B().Set().Key(mine.Lock[0]).Value(me.Holder).Px(2*time.Second).Build()).Error())
	a := eng.Attempt(ctx, mine, 0, &protocol.Request{Who: me, TTL: ttl}, opt)
	require.NoError(t, a.Err)
	require.Equal(t, []protocol.KeyState{protocol.Held}, a.State)
	v, left := get(mine.Lock[0])
	require.Equal(t, me.Holder, v)
	require.Greater(t, left, 10*time.Second, "the retry renewed the key to the TTL")

	// Held by someone else: a conflict with the holder's remaining time,
	// and the key keeps its holder and expiry.
	theirs := one("theirs")
	require.NoError(t, e.client.Do(ctx, e.client.B().Set().Key(theirs.Lock[0]).Value("tok-other").Px(7*time.Second).Build()).Error())
	a = eng.Attempt(ctx, theirs, 0, &protocol.Request{Who: me, TTL: ttl}, opt)
	require.NoError(t, a.Err)
	require.Equal(t, []protocol.KeyState{protocol.NotHeld}, a.State)
	require.Len(t, a.Conflicts, 1)
	require.Equal(t, 0, a.Conflicts[0].Index)
	require.Greater(t, a.Conflicts[0].TTL, 5*time.Second)
	require.LessOrEqual(t, a.Conflicts[0].TTL, 7*time.Second)
	v, left = get(theirs.Lock[0])
	require.Equal(t, "tok-other", v)
	require.LessOrEqual(t, left, 7*time.Second)

	// Not a string at all: the script's error, and nothing written.
	odd := one("odd")
	require.NoError(t, e.client.Do(ctx, e.client.B().Hset().Key(odd.Lock[0]).FieldValue().FieldValue("f", "v").Build()).Error())
	a = eng.Attempt(ctx, odd, 0, &protocol.Request{Who: me, TTL: ttl}, opt)
	require.Error(t, a.Err)
	require.Equal(t, []protocol.KeyState{protocol.NotHeld}, a.State)
	typ, err := e.client.Do(ctx, e.client.B().Type().Key(odd.Lock[0]).Build()).ToString()
	require.NoError(t, err)
	require.Equal(t, "hash", typ)

	for _, k := range []string{"free:first", "free:second", "mine"} {
		lost, err := releaseOn(eng, ctx, one(k), nil, me)
		require.NoError(t, err)
		require.Empty(t, lost)
	}
	_, err = e.client.Do(ctx, e.client.B().Get().Key(one("mine").Lock[0]).Build()).ToString()
	require.True(t, rueidis.IsRedisNil(err), "released")
}

// TestOneKeyRelease covers the release of a one-key plain lease
// (batch.releaseOne, release1.lua), on the engine directly: the lease's own
// key goes, plain, fenced or marked by a waiter (who then gets the wake-up
// message); a key held by anyone else, even by a token that merely starts
// with the lease's, is left alone and reported as not held; so is an
// absent key. One index of a larger set takes the same path.
func TestOneKeyRelease(t *testing.T) {
	t.Parallel()
	e, ctx, eng, one := oneKeyRig(t)
	me := protocol.Who{Holder: "tok-me"}
	put := func(set *protocol.Set, i int, v string) {
		require.NoError(t, e.client.Do(ctx, e.client.B().Set().Key(set.Lock[i]).Value(v).Px(20*time.Second).Build()).Error())
	}
	value := func(set *protocol.Set, i int) string {
		v, err := e.client.Do(ctx, e.client.B().Get().Key(set.Lock[i]).Build()).ToString()
		if rueidis.IsRedisNil(err) {
			return ""
		}
		require.NoError(t, err)
		return v
	}

	for _, v := range []string{"tok-me", "tok-me.42", "tok-me.42!"} {
		set := one("mine:" + v)
		put(set, 0, v)
		lost, err := releaseOn(eng, ctx, set, nil, me)
		require.NoError(t, err, v)
		require.Empty(t, lost, v)
		require.Empty(t, value(set, 0), "%s released", v)
	}

	for _, v := range []string{"tok-other", "tok-meX", "tok-me2.42", "tok-m", ""} {
		set := one("theirs:" + v)
		if v != "" {
			put(set, 0, v)
		}
		lost, err := releaseOn(eng, ctx, set, nil, me)
		require.NoError(t, err, v)
		require.Equal(t, []int{0}, lost, "%q is not the lease's", v)
		require.Equal(t, v, value(set, 0), "%q left alone", v)
	}

	// A marked key with nobody left in line: deleted.
	marked := one("marked")
	put(marked, 0, "tok-me!")
	lost, err := releaseOn(eng, ctx, marked, nil, me)
	require.NoError(t, err)
	require.Empty(t, lost)
	require.Empty(t, value(marked, 0))

	// One index of three.
	three := one("x", "y", "z")
	for i := range 3 {
		put(three, i, me.Holder)
	}
	lost, err = releaseOn(eng, ctx, three, []int{1}, me)
	require.NoError(t, err)
	require.Empty(t, lost)
	require.Equal(t, []string{me.Holder, "", me.Holder}, []string{value(three, 0), value(three, 1), value(three, 2)})
	lost, err = releaseOn(eng, ctx, three, nil, me)
	require.NoError(t, err)
	require.Equal(t, []int{1}, lost, "the key released before is reported")
}

// TestHeldKeyKeepsTheBareSet: a bare SET NX that finds its key held gets a
// nil reply, which is an answer, not a failure of the node. A node that
// failed a call is avoided by the bare commands for a while (see
// batch.exec); a held key must not put its node there, or one conflict
// would send every one-key lock on that node to the script for 15 s.
func TestHeldKeyKeepsTheBareSet(t *testing.T) {
	// Not parallel: it counts script calls on the masters.
	e, ctx, eng, one := oneKeyRig(t)
	scripts := func() int64 { return e.scriptCalls(ctx) }
	me := protocol.Who{Holder: "tok-me"}
	opt := protocol.AttemptOptions{Mode: protocol.AllOrNothing}
	ttl := 20 * time.Second

	// The first acquisition of an engine runs the script.
	prime := one("{node}prime")
	require.NoError(t, eng.Attempt(ctx, prime, 0, &protocol.Request{Who: me, TTL: ttl}, opt).Err)

	held := one("{node}held") // same slot, so the same master, as the next key
	require.NoError(t, e.client.Do(ctx, e.client.B().Set().Key(held.Lock[0]).Value("tok-other").Px(20*time.Second).Build()).Error())
	a := eng.Attempt(ctx, held, 0, &protocol.Request{Who: me, TTL: ttl}, opt)
	require.NoError(t, a.Err)
	require.Len(t, a.Conflicts, 1)

	free := one("{node}free")
	before := scripts()
	a = eng.Attempt(ctx, free, 0, &protocol.Request{Who: me, TTL: ttl}, opt)
	require.NoError(t, a.Err)
	require.Equal(t, []protocol.KeyState{protocol.Held}, a.State)
	require.Equal(t, before, scripts(), "the bare SET took the free key: its node is not troubled")
	for _, s := range []*protocol.Set{prime, free} {
		lost, err := releaseOn(eng, ctx, s, nil, me)
		require.NoError(t, err)
		require.Empty(t, lost)
	}
}

// releaseOn is Engine.Release with its result as (lost, err).
func releaseOn(eng *batch.Engine, ctx context.Context, set *protocol.Set, idx []int, who protocol.Who) ([]int, error) {
	r := eng.Release(ctx, set, idx, who)
	return r.Lost, r.Err
}
