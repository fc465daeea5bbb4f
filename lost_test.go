package slotlock_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/slotlock/slotlock"
	"github.com/slotlock/slotlock/slot"
)

// requireLost waits for lease to end (bounded by within) and checks that it
// ended as lost, naming exactly want, with every Lease.Context cancelled
// with cause ErrLeaseLost. It returns how long the end took from since.
func requireLost(t *testing.T, lease *slotlock.Lease, lctx context.Context, since time.Time, within time.Duration, want ...string) time.Duration {
	t.Helper()
	select {
	case <-lease.Done():
	case <-time.After(within):
		t.Fatalf("lease still alive %v after the event (err %v)", within, lease.Err())
	}
	took := time.Since(since)
	<-lctx.Done()
	require.ErrorIs(t, context.Cause(lctx), slotlock.ErrLeaseLost)
	var le *slotlock.LostError
	require.ErrorAs(t, lease.Err(), &le)
	require.Equal(t, want, le.Keys)
	return took
}

// requireRegistered waits until the tracker of l has found n keys held,
// which registered them on its connections.
func requireRegistered(t *testing.T, l *slotlock.Locker, n int64) {
	t.Helper()
	require.Eventually(t, func() bool { return l.LossStats().Held >= n }, 10*time.Second, time.Millisecond,
		"registered %d of %d keys", l.LossStats().Held, n)
}

// TestLossIsSeenAtOnce: an operator's DEL of one key among 1,000, and a SET
// that gives a key to someone else, end the lease within a second, where
// the watchdog (TTL 60 s: renewal every 20 s) would take up to 20 s. The
// lease and the context name the key.
func TestLossIsSeenAtOnce(t *testing.T) {
	t.Parallel()
	del := func(e *env, ctx context.Context, k string) error {
		return e.client.Do(ctx, e.client.B().Del().Key(k).Build()).Error()
	}
	renewing := slotlock.Options{TTL: time.Minute, Renew: slotlock.RenewAlways}
	pipelined := renewing
	pipelined.Strategy = slotlock.StrategyPipeline
	for _, tc := range []struct {
		name  string
		opt   slotlock.Options
		owner string // WithOwner's id: a reentrant lease
		write func(e *env, ctx context.Context, lockKey string) error
	}{
		{"DEL", renewing, "", del},
		{"SET by another", renewing, "", func(e *env, ctx context.Context, k string) error {
			// Deleted at the end: the key, someone else's, blocked the
			// same test's next run (-count=2, same prefix) for good.
			e.t.Cleanup(func() { _ = e.client.Do(context.Background(), e.client.B().Del().Key(k).Build()).Error() })
			return e.client.Do(ctx, e.client.B().Set().Key(k).Value("someone-else").Build()).Error()
		}},
		{"DEL, pipeline strategy", pipelined, "", del},
		{"DEL, reentrant", renewing, "worker-1", del},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			l := e.locker(tc.opt)
			ctx := ctxT(t, 60*time.Second)
			if tc.owner != "" {
				ctx = slotlock.WithOwner(ctx, tc.owner)
			}
			lease, err := l.Lock(ctx, keysN("seen", 1000)...)
			require.NoError(t, err)
			lctx, cancel := lease.Context(ctx)
			defer cancel()
			requireRegistered(t, l, 1000)
			names, _ := slot.NewNamer(e.prefix)
			victim := lease.Keys()[617]
			at := time.Now()
			require.NoError(t, tc.write(e, ctx, names.LockKey(victim)))
			took := requireLost(t, lease, lctx, at, 5*time.Second, victim)
			t.Logf("loss seen %v after the write", took)
			require.Positive(t, l.LossStats().Hints, "seen through an invalidation")
			// A second far below the renewal period (20 s): only the
			// server's notification can have ended the lease.
			require.Less(t, took, time.Second)
			err = lease.Release(ctx)
			var le *slotlock.LostError
			require.ErrorAs(t, err, &le)
		})
	}
}

// TestNoFalseLoss: a lease that is not lost survives everything that sends
// its tracker an invalidation without a loss: its own renewals (PEXPIRE of
// every key, every second), other leases taking and releasing other keys
// in the same slots, and its client's connections killed (the tracker's
// included: a nil invalidation, then a new connection). Bounded: 5 s.
func TestNoFalseLoss(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	name := "nofalse-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	client, err := e.c.Client(func(o *rueidis.ClientOption) { o.ClientName = name })
	require.NoError(t, err)
	t.Cleanup(client.Close)
	// 3 s (renewals every second): with 600 ms, the renewal after a
	// round of killed connections (a redial on a loaded machine) came
	// after the deadline, and the lease rightly ended (all 200 keys).
	const ttl = 3 * time.Second
	l, err := slotlock.New(client, slotlock.Options{Prefix: e.prefix, TTL: ttl, Renew: slotlock.RenewAlways})
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	other := e.locker(slotlock.Options{TTL: time.Second})
	ctx := ctxT(t, 60*time.Second)

	// Keys in the slots of "other" keys: "{tag}held:i" and "{tag}free:i".
	var held, free []string
	for i := range 200 {
		tag := "{" + strconv.Itoa(i%50) + "}"
		held = append(held, tag+"held:"+strconv.Itoa(i))
		free = append(free, tag+"free:"+strconv.Itoa(i))
	}
	lease, err := l.Lock(ctx, held...)
	require.NoError(t, err)
	requireRegistered(t, l, int64(len(held)))

	masters, err := e.c.Masters(ctx)
	require.NoError(t, err)
	kills := 0
	start := time.Now()
	for i := 0; time.Since(start) < 5*time.Second; i++ {
		// Other keys of the same slots change hands.
		o, err := other.Lock(ctx, free[i%len(free)], free[(i+7)%len(free)])
		require.NoError(t, err)
		require.NoError(t, o.Release(ctx))
		if i%50 == 49 {
			// Every connection of the lease's client, the tracker's too.
			for _, m := range masters {
				kills += killClients(t, ctx, m.Do, name)
			}
		}
		select {
		case <-lease.Done():
			// The deadline in the message tells a loss at the deadline (a
			// renewal too late: the machine, not the tracker) from a
			// false one.
			t.Fatalf("false loss after %v: %v (stats %+v; deadline %v ago)", time.Since(start), lease.Err(), l.LossStats(), time.Since(lease.Deadline()))
		case <-time.After(10 * time.Millisecond):
		}
	}
	st := l.LossStats()
	t.Logf("%d connections killed; tracker: %+v", kills, st)
	require.NoError(t, lease.Err())
	require.Positive(t, kills)
	require.Positive(t, st.Resyncs, "a killed tracking connection reports nil")
	// The renewals' own invalidations came, and each was read again as held.
	// Counts of events, not rates: how many renewals fit in the 5 s is
	// the machine's load.
	require.Positive(t, st.Hints)
	require.Positive(t, st.Held)
	// After all those reconnections the keys are registered again: a DEL
	// is still seen at once.
	names, _ := slot.NewNamer(e.prefix)
	victim := lease.Keys()[42]
	lctx, cancel := lease.Context(ctx)
	defer cancel()
	at := time.Now()
	require.NoError(t, e.client.Do(ctx, e.client.B().Del().Key(names.LockKey(victim)).Build()).Error())
	require.Less(t, requireLost(t, lease, lctx, at, 5*time.Second, victim), time.Second)
	// A release is not a loss, though its DELs invalidate every key.
	rel, err := l.Lock(ctx, free...)
	require.NoError(t, err)
	requireRegistered(t, l, st.Held+int64(len(free)))
	require.NoError(t, rel.Release(ctx))
	require.ErrorIs(t, rel.Err(), slotlock.ErrReleased)
}

// killClients kills, through do (one node), every connection named name
// and returns how many.
func killClients(t *testing.T, ctx context.Context, do func(context.Context, ...string) rueidis.RedisResult, name string) int {
	t.Helper()
	list, err := do(ctx, "CLIENT", "LIST", "TYPE", "normal").ToString()
	require.NoError(t, err)
	n := 0
	for _, line := range strings.Split(list, "\n") {
		if !strings.Contains(line, " name="+name+" ") {
			continue
		}
		id, _, _ := strings.Cut(strings.TrimPrefix(line, "id="), " ")
		if do(ctx, "CLIENT", "KILL", "ID", id).Error() == nil {
			n++
		}
	}
	return n
}

// TestExpiryIsSeenAtTheDeadline: a lease that is not renewed ends when its
// deadline passes, not at the watchdog's next tick (every TTL/3 = 500 ms
// here, so up to 500 ms later), naming every key.
func TestExpiryIsSeenAtTheDeadline(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	l := e.locker(slotlock.Options{TTL: 1500 * time.Millisecond, Renew: slotlock.RenewNever})
	ctx := ctxT(t, 30*time.Second)
	// A first lease starts the watchdog's ticks; the second comes 250 ms
	// later, so its deadline falls half-way between two ticks.
	first, err := l.Lock(ctx, "first")
	require.NoError(t, err)
	defer func() { _ = first.Release(ctx) }()
	time.Sleep(250 * time.Millisecond) // offsets the ticks; the assertion does not depend on it being exact
	// One slot, so one node: the server's own expiry of the keys, seen
	// through tracking, would name them all too (it can come first on a
	// loaded machine; TestLossOnNodeFaults/paused_master, where the server
	// cannot expire anything, isolates the deadline).
	keys := keysN("{exp}", 10)
	lease, err := l.Lock(ctx, keys...)
	require.NoError(t, err)
	lctx, cancel := lease.Context(ctx)
	defer cancel()
	deadline := lease.Deadline()
	want := lease.Keys()
	select {
	case <-lease.Done():
		t.Fatal("ended before its deadline")
	case <-time.After(time.Until(deadline) - 100*time.Millisecond):
	}
	late := requireLost(t, lease, lctx, deadline, 5*time.Second, want...)
	t.Logf("ended %v after the deadline", late)
	require.Less(t, late, 200*time.Millisecond)
}
