package slotlock_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/slotlock/slotlock"
	"github.com/slotlock/slotlock/slot"
)

// Inspect shows a held key's holder (short form), slot, node, TTL and
// fencing token; a free key as free; and it writes nothing.
func TestInspectHeldAndFree(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := ctxT(t, 30*time.Second)
	l := e.locker(slotlock.Options{TTL: 20 * time.Second, Fencing: true})
	lease, err := l.Lock(ctx, "order:1", "order:2")
	require.NoError(t, err)
	defer lease.Release(ctx)

	before := e.lockKeys()
	infos, err := l.Inspect(ctx, "order:2", "free:1", "order:1")
	require.NoError(t, err)
	require.Len(t, infos, 3)
	require.Equal(t, before, e.lockKeys(), "Inspect wrote")

	names, _ := slot.NewNamer(e.prefix)
	for _, i := range []int{0, 2} {
		k := infos[i]
		require.NoError(t, k.Err)
		require.True(t, k.Held, "%s", k.Key)
		require.False(t, k.Reserved)
		require.Equal(t, lease.ID(), k.Holder)
		require.NotEqual(t, lease.Token(), k.Holder)
		require.Equal(t, 1, k.Holds)
		require.False(t, k.Reentrant)
		fence, ok := lease.FencingToken(k.Key)
		require.True(t, ok)
		require.Equal(t, fence, k.Fence)
		require.Greater(t, k.TTL, 10*time.Second)
		require.LessOrEqual(t, k.TTL, 20*time.Second)
		require.Equal(t, names.LockKey(k.Key), k.LockKey)
		require.Equal(t, slot.KeySlot(k.Key), k.Slot)
		master, err := e.c.NodeForSlot(ctx, k.Slot)
		require.NoError(t, err)
		require.Equal(t, master.Addr(), k.Node)
	}
	require.Equal(t, "order:2", infos[0].Key, "the order given")
	free := infos[1]
	require.NoError(t, free.Err)
	require.False(t, free.Held)
	require.Empty(t, free.Holder)
	require.Zero(t, free.TTL)
	require.Zero(t, free.Holds)
	require.Empty(t, free.Waiters)
	// The token never shows, whole or in part longer than the short form.
	require.NotContains(t, fmt.Sprintf("%+v", infos), lease.Token())
	require.NotContains(t, fmt.Sprintf("%+v", infos), lease.Token()[:12])
}

// Reentrant holds show the owner's short form and the number of holds.
func TestInspectReentrant(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := ctxT(t, 30*time.Second)
	l := e.locker(slotlock.Options{})
	octx := slotlock.WithOwner(ctx, "job-7")
	a, err := l.Lock(octx, "r:1")
	require.NoError(t, err)
	b, err := l.Lock(octx, "r:1", "r:2")
	require.NoError(t, err)
	infos, err := l.Inspect(ctx, "r:1", "r:2")
	require.NoError(t, err)
	require.Equal(t, l.OwnerID("job-7"), infos[0].Holder)
	require.NotEqual(t, l.OwnerID("job-8"), infos[0].Holder)
	require.True(t, infos[0].Reentrant)
	require.Equal(t, 2, infos[0].Holds)
	require.Equal(t, 1, infos[1].Holds)
	require.NoError(t, a.Release(ctx))
	infos, err = l.Inspect(ctx, "r:1")
	require.NoError(t, err)
	require.Equal(t, 1, infos[0].Holds)
	require.NoError(t, b.Release(ctx))
	infos, err = l.Inspect(ctx, "r:1")
	require.NoError(t, err)
	require.False(t, infos[0].Held)
	require.Zero(t, infos[0].Holds)
}

// A waiter of another Locker (its own client: as another process would)
// shows in the key's line under the ID its lease has once granted; a
// reservation shows whom it is for.
func TestInspectLineAndReservation(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := ctxT(t, 60*time.Second)
	l := e.locker(slotlock.Options{})
	other := newEnvOn(t, e.c)
	other.prefix = e.prefix
	l2 := other.locker(slotlock.Options{})

	holder, err := l.Lock(ctx, "line:1")
	require.NoError(t, err)
	got := make(chan *slotlock.Lease, 1)
	go func() {
		lease, err := l2.Lock(ctx, "line:1")
		if err != nil {
			t.Error(err)
		}
		got <- lease
	}()
	var seen slotlock.KeyInfo
	require.Eventually(t, func() bool {
		infos, err := l.Inspect(ctx, "line:1")
		require.NoError(t, err)
		seen = infos[0]
		return seen.WaitersTotal == 1
	}, 20*time.Second, 20*time.Millisecond)
	require.True(t, seen.Marked, "a waiter in line marks the key")
	require.Len(t, seen.Waiters, 1)
	w := seen.Waiters[0]
	require.WithinDuration(t, time.Now(), w.Joined, 10*time.Second)
	require.True(t, w.Deadline.After(w.Joined))
	require.NoError(t, holder.Release(ctx))
	waiter := <-got
	require.NotNil(t, waiter)
	require.Equal(t, waiter.ID(), w.ID)
	require.NoError(t, waiter.Release(ctx))

	// A reservation (written by hand: a real one lives 500 ms).
	names, _ := slot.NewNamer(e.prefix)
	lock := names.LockKey("line:2")
	require.NoError(t, e.client.Do(ctx, e.client.B().Set().Key(lock).Value("^tokenOfAWaiter!").Px(10*time.Second).Build()).Error())
	infos, err := l.Inspect(ctx, "line:2")
	require.NoError(t, err)
	k := infos[0]
	require.True(t, k.Reserved)
	require.False(t, k.Held)
	require.True(t, k.Marked)
	require.Equal(t, slotlock.ShortID("tokenOfAWaiter"), k.ReservedFor)
	require.Empty(t, k.Holder)
	require.Greater(t, k.TTL, 5*time.Second)

	// A waiter by reservation's own reservation names its ticket and inbox
	// too; Inspect shows the waiter.
	require.NoError(t, e.client.Do(ctx, e.client.B().Set().Key(lock).Value("^1795542335123456:tokenOfAWaiter:"+names.InboxInSlot("id", slot.KeySlot("line:2"))).Px(10*time.Second).Build()).Error())
	infos, err = l.Inspect(ctx, "line:2")
	require.NoError(t, err)
	k = infos[0]
	require.True(t, k.Reserved)
	require.False(t, k.Marked)
	require.Equal(t, slotlock.ShortID("tokenOfAWaiter"), k.ReservedFor)
}

// Bad input is refused before anything is sent; a lock key of another type
// fails that key only, naming it.
func TestInspectBadInput(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := ctxT(t, 30*time.Second)
	l := e.locker(slotlock.Options{})
	_, err := l.Inspect(ctx)
	require.ErrorIs(t, err, slotlock.ErrInvalid)
	_, err = l.Inspect(ctx, "a", "")
	require.ErrorIs(t, err, slotlock.ErrInvalid)
	require.ErrorContains(t, err, "key 1 is empty")

	names, _ := slot.NewNamer(e.prefix)
	require.NoError(t, e.client.Do(ctx, e.client.B().Hset().Key(names.LockKey("odd")).FieldValue().FieldValue("f", "v").Build()).Error())
	infos, err := l.Inspect(ctx, "fine", "odd")
	require.ErrorIs(t, err, slotlock.ErrRedis)
	var ne *slotlock.NodeError
	require.ErrorAs(t, err, &ne)
	require.Equal(t, infos[1].Node, ne.Node)
	require.ErrorContains(t, err, `"odd"`)
	require.NoError(t, infos[0].Err)
	require.Error(t, infos[1].Err)

	require.NoError(t, l.Close())
	_, err = l.Inspect(context.Background(), "a")
	require.ErrorIs(t, err, slotlock.ErrClosed)
}

// Readers of a shared key show as readers, each by its Lease.ID, latest
// expiry first, in both storage forms (one reader: the lock value names
// it; several: the holders set does); a reader whose expiry passed (a
// crashed one, not pruned yet) is not counted.
func TestInspectSharedReaders(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := ctxT(t, 30*time.Second)
	l := e.locker(slotlock.Options{TTL: 20 * time.Second})
	var readers []*slotlock.Lease
	for i := range 3 {
		// Growing TTLs: each later reader has the later expiry.
		lease, err := l.Acquire(ctx, slotlock.Request{Shared: []string{"cust:1"}, TTL: time.Duration(10+i) * time.Second})
		require.NoError(t, err)
		defer lease.Release(ctx)
		readers = append(readers, lease)
	}
	alone, err := l.Acquire(ctx, slotlock.Request{Shared: []string{"cust:2"}})
	require.NoError(t, err)
	defer alone.Release(ctx)
	// A crashed reader of cust:1: a member whose expiry passed.
	names, _ := slot.NewNamer(e.prefix)
	set := names.SharedKeyInSlot("cust:1", slot.KeySlot("cust:1"))
	require.NoError(t, e.client.Do(ctx, e.client.B().Zadd().Key(set).ScoreMember().ScoreMember(1, "dead-reader-token").Build()).Error())

	infos, err := l.Inspect(ctx, "cust:1", "cust:2")
	require.NoError(t, err)
	many, one := infos[0], infos[1]
	require.NoError(t, many.Err)
	require.True(t, many.Held)
	require.True(t, many.Shared)
	require.Empty(t, many.Holder, "several readers: no one holder")
	require.Equal(t, []string{readers[2].ID(), readers[1].ID(), readers[0].ID()}, many.Readers)
	require.Equal(t, 3, many.Holds)
	require.False(t, many.Reentrant)
	require.Zero(t, many.Fence)
	require.Greater(t, many.TTL, 9*time.Second)

	require.True(t, one.Shared)
	require.Equal(t, alone.ID(), one.Holder)
	require.Equal(t, []string{alone.ID()}, one.Readers)
	require.Equal(t, 1, one.Holds)

	// An exclusive key is not shared and has no readers.
	x, err := l.Lock(ctx, "cust:3")
	require.NoError(t, err)
	defer x.Release(ctx)
	infos, err = l.Inspect(ctx, "cust:3")
	require.NoError(t, err)
	require.False(t, infos[0].Shared)
	require.Empty(t, infos[0].Readers)
	require.Equal(t, x.ID(), infos[0].Holder)
	require.NotContains(t, fmt.Sprintf("%+v", infos), readers[0].Token())
}

// InspectPermits shows a resource's live holders (Lease.ID, units,
// remaining life, latest first), the units in use and the limit; not a
// holder whose expiry passed (a crashed one, not pruned yet); a free
// resource as unused; and an empty resource name as ErrInvalid.
func TestInspectPermits(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := ctxT(t, 30*time.Second)
	l := e.locker(slotlock.Options{TTL: 20 * time.Second})
	one, err := l.Acquire(ctx, slotlock.Request{Permits: []slotlock.Permit{{Resource: "pool:a", Units: 1, Limit: 4}}, TTL: 5 * time.Second})
	require.NoError(t, err)
	defer one.Release(ctx)
	two, err := l.Acquire(ctx, slotlock.Request{Permits: []slotlock.Permit{{Resource: "pool:a", Units: 2, Limit: 4}}, TTL: 15 * time.Second})
	require.NoError(t, err)
	defer two.Release(ctx)
	names, _ := slot.NewNamer(e.prefix)
	h := names.PermitKeyInSlot("pool:a", slot.KeySlot("pool:a"))
	require.NoError(t, e.client.Do(ctx, e.client.B().Hset().Key(h).FieldValue().FieldValue("dead-holder-token", "1:1000").Build()).Error())

	infos, err := l.InspectPermits(ctx, "pool:a", "pool:free")
	require.NoError(t, err)
	a, free := infos[0], infos[1]
	require.NoError(t, a.Err)
	require.Equal(t, h, a.Key)
	require.Equal(t, int64(4), a.Limit)
	require.Equal(t, int64(3), a.Used)
	require.Len(t, a.Holders, 2)
	require.Equal(t, two.ID(), a.Holders[0].ID)
	require.Equal(t, int64(2), a.Holders[0].Units)
	require.Greater(t, a.Holders[0].TTL, 10*time.Second)
	require.LessOrEqual(t, a.Holders[0].TTL, 15*time.Second)
	require.Equal(t, one.ID(), a.Holders[1].ID)
	require.Equal(t, int64(1), a.Holders[1].Units)
	require.LessOrEqual(t, a.Holders[1].TTL, 5*time.Second)
	master, err := e.c.NodeForSlot(ctx, a.Slot)
	require.NoError(t, err)
	require.Equal(t, master.Addr(), a.Node)
	require.NotContains(t, fmt.Sprintf("%+v", infos), one.Token())

	require.NoError(t, free.Err)
	require.Zero(t, free.Used)
	require.Zero(t, free.Limit)
	require.Empty(t, free.Holders)

	_, err = l.InspectPermits(ctx, "pool:a", "")
	require.ErrorIs(t, err, slotlock.ErrInvalid)
	require.ErrorContains(t, err, "resource 1 is empty")
}
