package slotlock_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/slotlock/slotlock/internal/lockval"
	"github.com/slotlock/slotlock/internal/protocol"
)

// TestReserveReportsEachKey runs the engine's Reserve (reserve.lua on
// every node, as a waiter by reservation sends it) and reads what it
// reports per key (protocol.KeyReply, docs/design.md, "Waiting by
// reservation across processes"): a free key reserved by the round, a held key with the entry the
// waiter stands under (created by round 2, kept by round 3), and a key
// reserved for the waiter by a later round (9), which the guard leaves
// alone. The reservation names the round that wrote it. Mutation
// checked: batch/reserve.go reading every code but -1 as Mine (the held
// key reads as reserved).
func TestReserveReportsEachKey(t *testing.T) {
	t.Parallel()
	e, ctx, eng, one := oneKeyRig(t)
	get := func(k string) string {
		v, _ := e.client.Do(ctx, e.client.B().Get().Key(k).Build()).ToString()
		return v
	}
	set := one("rr:free", "rr:held", "rr:newer")
	// The set orders its keys canonically: find each by its name.
	idx := map[string]int{}
	var free, held, newer string
	for i, k := range set.Lock {
		idx[k] = i
		switch {
		case strings.HasSuffix(k, "rr:free"):
			free = k
		case strings.HasSuffix(k, "rr:held"):
			held = k
		default:
			newer = k
		}
	}
	me := protocol.Who{Holder: "tok-waiter"}
	req := &protocol.Request{Who: me}
	ticket, err := eng.Ticket(ctx)
	require.NoError(t, err)
	tk, err := strconv.ParseInt(ticket, 10, 64)
	require.NoError(t, err)
	newerValue := lockval.FormatReserved(lockval.Reservation{Ticket: tk, Waiter: me.Holder, Inbox: "elsewhere", Seq: 9})
	require.NoError(t, e.client.Do(ctx, e.client.B().Set().Key(held).Value("other").Px(30*time.Second).Build()).Error())
	require.NoError(t, e.client.Do(ctx, e.client.B().Set().Key(newer).Value(newerValue).Px(30*time.Second).Build()).Error())

	for _, round := range []int64{2, 3} {
		res := eng.Reserve(ctx, set, req, ticket, round, false)
		require.NoError(t, res.Err)
		require.Equal(t, protocol.KeyReply{Mine: true}, res.Keys[idx[free]], "round %d, free key", round)
		require.Equal(t, protocol.KeyReply{Entry: 2}, res.Keys[idx[held]], "round %d, held key: in line under round 2's entry", round)
		require.Equal(t, protocol.KeyReply{Stale: true}, res.Keys[idx[newer]], "round %d, key reserved by round 9", round)
		v := get(free)
		r, ok := lockval.ParseReserved(v)
		require.True(t, ok && r.Waiter == me.Holder && r.Seq == round, "free key after round %d: %q", round, v)
		require.Equal(t, newerValue, get(newer))
	}
	res := eng.Reserve(ctx, set, req, ticket, 10, true)
	require.NoError(t, res.Err)
	for _, k := range []string{free, newer} {
		n, err := e.client.Do(ctx, e.client.B().Exists().Key(k).Build()).AsInt64()
		require.NoError(t, err)
		require.Zero(t, n, "%s after the leave of round 10", k)
	}
	require.Equal(t, "other!", get(held), "the held key: untouched but for the mark of the join")
}
