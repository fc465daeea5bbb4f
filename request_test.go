package slotlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/slotlock/slotlock"
	"github.com/slotlock/slotlock/slot"
)

// TestRequestSharedAndExclusive: readers share, a writer excludes them and
// they exclude it, in both call forms; releases leave nothing behind.
func TestRequestSharedAndExclusive(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			e := newEnv(t)
			l := e.locker(slotlock.Options{PerSlot: m.perSlot})
			ctx := ctxT(t, 30*time.Second)
			shared := keysN("s", 20)
			r1, err := l.Acquire(ctx, slotlock.Request{Shared: shared, Exclusive: []string{"x1"}})
			require.NoError(t, err)
			r2, err := l.Acquire(ctx, slotlock.Request{Shared: shared, Exclusive: []string{"x2"}})
			require.NoError(t, err, "readers share")

			// A writer of any shared key is refused, all or nothing, and so
			// is a Lock-style TryLock (the pre-existing exclusive path).
			_, err = l.Acquire(ctx, slotlock.Request{Exclusive: []string{"free", shared[7]}})
			var ce *slotlock.ConflictError
			require.ErrorAs(t, err, &ce)
			require.Equal(t, shared[7], ce.Conflicts[0].Key)
			_, err = l.TryLock(ctx, shared[3], "free")
			require.ErrorAs(t, err, &ce)
			require.Equal(t, shared[3], ce.Conflicts[0].Key)
			// A reader of a key held exclusively is refused.
			_, err = l.Acquire(ctx, slotlock.Request{Shared: []string{"x1", "free"}})
			require.ErrorAs(t, err, &ce)
			require.Equal(t, "x1", ce.Conflicts[0].Key)

			_, ok := r1.FencingToken(shared[0])
			require.False(t, ok, "a shared grant has no fencing token")
			require.NoError(t, r1.Release(ctx))
			_, err = l.TryLock(ctx, shared[0])
			require.ErrorAs(t, err, &ce, "the second reader still holds it")
			require.NoError(t, r2.Release(ctx))
			require.Empty(t, e.lockKeys())

			w, err := l.Acquire(ctx, slotlock.Request{Exclusive: shared})
			require.NoError(t, err, "free for a writer once the readers left")
			require.NoError(t, w.Release(ctx))
			require.Empty(t, e.lockKeys())
		})
	}
}

// TestRequestPermits: units are counted against the limit across leases,
// come back at release, and a second limit for a resource is refused.
func TestRequestPermits(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			e := newEnv(t)
			l := e.locker(slotlock.Options{PerSlot: m.perSlot})
			ctx := ctxT(t, 30*time.Second)
			p := func(u int64) slotlock.Request {
				return slotlock.Request{Permits: []slotlock.Permit{{Resource: "pool", Units: u, Limit: 5}}}
			}
			a, err := l.Acquire(ctx, p(3))
			require.NoError(t, err)
			b, err := l.Acquire(ctx, p(2))
			require.NoError(t, err)
			_, err = l.Acquire(ctx, p(1))
			require.ErrorIs(t, err, slotlock.ErrNotAcquired, "5 of 5 in use")
			_, err = l.Acquire(ctx, slotlock.Request{Permits: []slotlock.Permit{{Resource: "pool", Units: 1, Limit: 6}}})
			require.ErrorIs(t, err, slotlock.ErrInvalid)
			require.ErrorContains(t, err, `"pool"`)
			require.NoError(t, a.Release(ctx))
			c, err := l.Acquire(ctx, p(3))
			require.NoError(t, err, "a's units came back")
			require.NoError(t, b.Release(ctx))
			require.NoError(t, c.Release(ctx))
			require.Empty(t, e.lockKeys())
			// With no live holder, another limit is fine.
			d, err := l.Acquire(ctx, slotlock.Request{Permits: []slotlock.Permit{{Resource: "pool", Units: 6, Limit: 6}}})
			require.NoError(t, err)
			require.NoError(t, d.Release(ctx))
		})
	}
}

// inLine waits until key's line in Redis has n waiters.
func (e *env) inLine(ctx context.Context, key string, n int64) {
	e.t.Helper()
	names, err := slot.NewNamer(e.prefix)
	require.NoError(e.t, err)
	q := names.QueueKeyInSlot(key, slot.KeySlot(key))
	for {
		got, err := e.client.Do(ctx, e.client.B().Zcard().Key(q).Build()).AsInt64()
		require.NoError(e.t, err)
		if got >= n {
			return
		}
		select {
		case <-ctx.Done():
			e.t.Fatalf("key %q: %d waiters in line, want %d", key, got, n)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// TestRequestWriterNotStarved: once a writer waits in a shared key's line,
// no new reader is admitted; the last reader's release hands the key to
// the writer, and readers that queued behind the writer get in after it
// (together: TestReadersQueuedTogetherAreGrantedTogether).
func TestRequestWriterNotStarved(t *testing.T) {
	e := newEnv(t)
	// Each actor has a Locker of its own: they meet in Redis, not in one
	// Locker's in-process queue.
	l := func() *slotlock.Locker { return e.locker(slotlock.Options{}) }
	ctx := ctxT(t, 30*time.Second)
	reader := func() slotlock.Request { return slotlock.Request{Shared: []string{"k"}, Wait: slotlock.WaitForever} }
	r1, err := l().Acquire(ctx, reader())
	require.NoError(t, err)

	wGot := make(chan *slotlock.Lease, 1)
	go func() {
		w, err := l().Acquire(ctx, slotlock.Request{Exclusive: []string{"k"}, Wait: slotlock.WaitForever})
		assert.NoError(t, err)
		wGot <- w
	}()
	e.inLine(ctx, "k", 1)

	// A new reader, not waiting: refused while the writer is in line.
	_, err = l().Acquire(ctx, slotlock.Request{Shared: []string{"k"}})
	var ce *slotlock.ConflictError
	require.ErrorAs(t, err, &ce, "a reader jumped a waiting writer")

	// Two waiting readers queue behind the writer.
	rGot := make(chan *slotlock.Lease, 2)
	for range 2 {
		go func() {
			r, err := l().Acquire(ctx, reader())
			assert.NoError(t, err)
			rGot <- r
		}()
	}
	e.inLine(ctx, "k", 3)
	// Let the readers' wait timers run well into their second (each
	// waiter's wait is at most protocol.MaxWait), so that one left to its
	// timer cannot come in time by chance.
	select {
	case <-wGot:
		t.Fatal("the writer got the key while a reader held it")
	case <-rGot:
		t.Fatal("a reader got in before the waiting writer")
	case <-time.After(300 * time.Millisecond):
	}
	require.NoError(t, r1.Release(ctx))
	w := <-wGot
	require.NotNil(t, w)
	select {
	case <-rGot:
		t.Fatal("a reader got in while the writer held the key")
	case <-time.After(100 * time.Millisecond):
	}
	require.NoError(t, w.Release(ctx))
	a, b := <-rGot, <-rGot
	require.NotNil(t, a)
	require.NotNil(t, b)
	// Both readers hold the key at once.
	require.NoError(t, a.Err())
	require.NoError(t, b.Err())
	require.NoError(t, a.Release(ctx))
	require.NoError(t, b.Release(ctx))
	require.Empty(t, e.lockKeys())
}

// TestRequestBadInput: each bad request is an ErrInvalid naming the
// offender, and nothing reaches Redis.
func TestRequestBadInput(t *testing.T) {
	e := newEnv(t)
	l := e.locker(slotlock.Options{})
	ctx := ctxT(t, 30*time.Second)
	p := func(res string, u, lim int64) []slotlock.Permit {
		return []slotlock.Permit{{Resource: res, Units: u, Limit: lim}}
	}
	for _, c := range []struct {
		name string
		req  slotlock.Request
		want string
	}{
		{"shared and exclusive", slotlock.Request{Exclusive: []string{"a", "both"}, Shared: []string{"both"}}, `"both"`},
		{"zero units", slotlock.Request{Permits: p("pool", 0, 3)}, `permit "pool": units 0`},
		{"negative units", slotlock.Request{Permits: p("pool", -2, 3)}, `permit "pool": units -2`},
		{"units above limit", slotlock.Request{Permits: p("pool", 4, 3)}, `permit "pool": units 4 above its limit 3`},
		{"zero limit", slotlock.Request{Permits: p("pool", 1, 0)}, `permit "pool": limit 0`},
		{"empty resource", slotlock.Request{Shared: []string{"a"}, Permits: p("", 1, 3)}, "permit 0 has an empty resource name"},
		{"permit twice", slotlock.Request{Permits: append(p("pool", 1, 3), p("pool", 1, 3)...)}, `permit "pool" asked for twice`},
		{"ttl below 1ms", slotlock.Request{Shared: []string{"a"}, TTL: 999 * time.Microsecond}, "Request.TTL 999µs"},
		{"negative ttl", slotlock.Request{Shared: []string{"a"}, TTL: -time.Second}, "Request.TTL -1s"},
		{"negative wait", slotlock.Request{Shared: []string{"a"}, Wait: -1}, "Request.Wait"},
		{"empty shared key", slotlock.Request{Shared: []string{"a", ""}}, "shared key 1 is empty"},
		{"empty exclusive key", slotlock.Request{Exclusive: []string{""}}, "exclusive key 0 is empty"},
		{"nothing", slotlock.Request{}, "empty request"},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := e.scriptCalls(ctx)
			_, err := l.Acquire(ctx, c.req)
			require.ErrorIs(t, err, slotlock.ErrInvalid)
			require.ErrorContains(t, err, c.want)
			require.Equal(t, before, e.scriptCalls(ctx), "a script ran")
			require.Empty(t, e.lockKeys())
		})
	}
}

// TestRequestPipelineRefuses: the pipeline strategy refuses shared keys
// and permits with ErrUnsupported before it sends anything; exclusive
// requests work.
func TestRequestPipelineRefuses(t *testing.T) {
	e := newEnv(t)
	l := e.locker(slotlock.Options{Strategy: slotlock.StrategyPipeline})
	ctx := ctxT(t, 30*time.Second)
	for _, req := range []slotlock.Request{
		{Exclusive: []string{"a"}, Shared: []string{"b"}},
		{Exclusive: []string{"a"}, Permits: []slotlock.Permit{{Resource: "p", Units: 1, Limit: 1}}},
	} {
		_, err := l.Acquire(ctx, req)
		require.ErrorIs(t, err, slotlock.ErrUnsupported)
		require.Empty(t, e.lockKeys(), "nothing sent")
	}
	le, err := l.Acquire(ctx, slotlock.Request{Exclusive: []string{"a", "b"}, TTL: 5 * time.Second})
	require.NoError(t, err)
	require.NoError(t, le.Release(ctx))
}

// TestRequestRenewedAndLost: a short per-request TTL is renewed by the
// watchdog (whose Locker TTL is far longer), shared keys and permits
// included; an operator deleting a shared key's holders ends the lease as
// lost, naming that key.
func TestRequestRenewedAndLost(t *testing.T) {
	e := newEnv(t)
	// 1 s, not shorter: with 300 ms, a renewal that a loaded machine
	// delayed past the 200 ms of slack ended the lease (seen at load 10).
	const reqTTL = time.Second
	l := e.locker(slotlock.Options{TTL: time.Minute})
	ctx := ctxT(t, 30*time.Second)
	le, err := l.Acquire(ctx, slotlock.Request{
		Exclusive: []string{"x"}, Shared: []string{"s1", "s2"},
		Permits: []slotlock.Permit{{Resource: "pool", Units: 2, Limit: 3}},
		TTL:     reqTTL,
	})
	require.NoError(t, err)
	// A second reader of s1 turns it to the holders-hash form (its own
	// TTL is the lease's too).
	other, err := l.Acquire(ctx, slotlock.Request{Shared: []string{"s1"}, TTL: reqTTL})
	require.NoError(t, err)
	// Nothing lives without a TTL, and nothing longer than this lease's.
	masters, err := e.c.Masters(ctx)
	require.NoError(t, err)
	stored := 0
	for _, m := range masters {
		keys, err := m.Do(ctx, "KEYS", e.prefix+"{*").AsStrSlice()
		require.NoError(t, err)
		for _, k := range keys {
			pttl, err := m.Do(ctx, "PTTL", k).AsInt64()
			require.NoError(t, err)
			require.True(t, pttl > 0 && pttl <= reqTTL.Milliseconds(), "key %q: PTTL %d", k, pttl)
			stored++
		}
	}
	require.Equal(t, 5, stored, "x, s1 and its holders, s2 (one holder: no hash), pool")
	select {
	case <-le.Done():
		t.Fatalf("lease ended: %v", le.Err())
	case <-time.After(3 * reqTTL):
	}
	var ce *slotlock.ConflictError
	_, err = l.Acquire(ctx, slotlock.Request{Exclusive: []string{"s2"}})
	require.ErrorAs(t, err, &ce, "the shared hold outlived its TTL only by renewal")
	_, err = l.Acquire(ctx, slotlock.Request{Permits: []slotlock.Permit{{Resource: "pool", Units: 2, Limit: 3}}})
	require.ErrorAs(t, err, &ce, "the permit's units are still taken")

	names, err := slot.NewNamer(e.prefix)
	require.NoError(t, err)
	h := names.SharedKeyInSlot("s1", slot.KeySlot("s1"))
	require.NoError(t, e.client.Do(ctx, e.client.B().Del().Key(h).Build()).Error())
	select {
	case <-le.Done():
	case <-ctx.Done():
		t.Fatal("the loss went unseen")
	}
	var lost *slotlock.LostError
	require.ErrorAs(t, le.Err(), &lost)
	require.Equal(t, []string{"s1"}, lost.Keys)
	<-other.Done()
	require.ErrorAs(t, other.Err(), &lost, "the other reader lost it too")
	err = le.Release(ctx)
	require.ErrorAs(t, err, &lost)
	// The release took everything else back; s1's lock key, whose
	// holders an operator deleted, is no one's to delete: it lapses
	// within the TTL.
	s1 := names.LockKey("s1")
	require.Equal(t, map[string]string{s1: "~"}, e.lockKeys())
	pttl, err := e.client.Do(ctx, e.client.B().Pttl().Key(s1).Build()).AsInt64()
	require.NoError(t, err)
	require.LessOrEqual(t, pttl, reqTTL.Milliseconds())

	// A reader joining such a key (several holders' form, its set gone)
	// makes the set again, with a TTL (shared_cover in shared.lua reads
	// the set's expiry for this case), and its release leaves nothing.
	s3, h3 := names.LockKey("s3"), names.SharedKeyInSlot("s3", slot.KeySlot("s3"))
	require.NoError(t, e.client.Do(ctx, e.client.B().Set().Key(s3).Value("~").Px(10*time.Second).Build()).Error())
	late, err := l.Acquire(ctx, slotlock.Request{Shared: []string{"s3"}, TTL: 300 * time.Millisecond})
	require.NoError(t, err)
	pttl, err = e.client.Do(ctx, e.client.B().Pttl().Key(h3).Build()).AsInt64()
	require.NoError(t, err)
	require.True(t, pttl > 0 && pttl <= 300, "the holders set made again: PTTL %d", pttl)
	require.NoError(t, late.Release(ctx))
	require.NotContains(t, e.lockKeys(), s3)
	n, err := e.client.Do(ctx, e.client.B().Exists().Key(h3).Build()).AsInt64()
	require.NoError(t, err)
	require.Zero(t, n, "the holders set is gone")
}

// TestRequestReentrantOwner: leases of one owner are separate shared
// holders and permit takers (one's release leaves the other's hold), take
// their exclusive keys again as Lock does, and an owner's exclusive hold is
// not a shared one: a shared request of the same owner conflicts with it.
func TestRequestReentrantOwner(t *testing.T) {
	e := newEnv(t)
	l := e.locker(slotlock.Options{})
	ctx := ctxT(t, 30*time.Second)
	octx := slotlock.WithOwner(ctx, "job-7")
	req := slotlock.Request{Exclusive: []string{"x"}, Shared: []string{"s"},
		Permits: []slotlock.Permit{{Resource: "pool", Units: 2, Limit: 3}}}
	a, err := l.Acquire(octx, req)
	require.NoError(t, err)
	b, err := l.Acquire(octx, slotlock.Request{Exclusive: []string{"x"}, Shared: []string{"s"}})
	require.NoError(t, err, "the owner takes its exclusive key again and shares s with itself")
	_, err = l.Acquire(octx, slotlock.Request{Permits: []slotlock.Permit{{Resource: "pool", Units: 2, Limit: 3}}})
	require.ErrorIs(t, err, slotlock.ErrNotAcquired, "each lease's units count, the owner's too")
	var ce *slotlock.ConflictError
	_, err = l.Acquire(octx, slotlock.Request{Shared: []string{"x"}})
	require.ErrorAs(t, err, &ce, "no downgrade: the owner's exclusive hold is not shared")

	require.NoError(t, a.Release(ctx))
	_, err = l.TryLock(ctx, "s")
	require.ErrorAs(t, err, &ce, "b still reads s")
	_, err = l.TryLock(ctx, "x")
	require.ErrorAs(t, err, &ce, "b still holds x")
	c, err := l.Acquire(ctx, slotlock.Request{Permits: []slotlock.Permit{{Resource: "pool", Units: 3, Limit: 3}}})
	require.NoError(t, err, "a's units came back")
	require.NoError(t, c.Release(ctx))
	require.NoError(t, b.Release(ctx))
	require.Empty(t, e.lockKeys())
}

// TestRequestFencingAndNames: exclusive keys of a request get fencing
// tokens, found by name among shared keys and permits of the same slot
// (also a permit named like a key); shared keys and permits get none.
func TestRequestFencingAndNames(t *testing.T) {
	e := newEnv(t)
	l := e.locker(slotlock.Options{Fencing: true})
	ctx := ctxT(t, 30*time.Second)
	le, err := l.Acquire(ctx, slotlock.Request{
		Exclusive: []string{"{t}z", "{t}m", "a", "{t}0"},
		Shared:    []string{"{t}b", "{t}y"},
		Permits: []slotlock.Permit{{Resource: "{t}a", Units: 1, Limit: 2}, {Resource: "{t}m", Units: 1, Limit: 2},
			{Resource: "{t}zz", Units: 1, Limit: 2}, {Resource: "{t}zy", Units: 1, Limit: 2}, {Resource: "{t}zx", Units: 1, Limit: 2}},
	})
	require.NoError(t, err)
	for _, k := range []string{"{t}z", "{t}m", "a", "{t}0"} {
		f, ok := le.FencingToken(k)
		require.True(t, ok, "key %q", k)
		require.Positive(t, f, "key %q", k)
	}
	for _, k := range []string{"{t}b", "{t}y", "{t}a", "{t}zz"} {
		_, ok := le.FencingToken(k)
		require.False(t, ok, "shared key or permit %q", k)
	}
	// Guard checks the exclusive keys of the slot; shared ones alone do not
	// entitle a write.
	_, err = le.Guard(ctx, []string{"{t}data"}, "SET", "{t}data", "1")
	require.NoError(t, err)
	r, err := l.Acquire(ctx, slotlock.Request{Shared: []string{"{u}k"}})
	require.NoError(t, err)
	_, err = r.Guard(ctx, []string{"{u}data"}, "SET", "{u}data", "1")
	require.ErrorIs(t, err, slotlock.ErrInvalid)
	require.NoError(t, r.Release(ctx))
	require.NoError(t, le.Release(ctx))
}

// TestRequestInspect: Inspect reads shared keys as held (by the lease's
// ID when one reader holds it), and permits' resources as free lock keys
// (a permit lives in its own hash, not in the lock key).
func TestRequestInspect(t *testing.T) {
	e := newEnv(t)
	l := e.locker(slotlock.Options{})
	ctx := ctxT(t, 30*time.Second)
	a, err := l.Acquire(ctx, slotlock.Request{Shared: []string{"one", "two"}})
	require.NoError(t, err)
	b, err := l.Acquire(ctx, slotlock.Request{Shared: []string{"two"}, Permits: []slotlock.Permit{{Resource: "pool", Units: 1, Limit: 2}}})
	require.NoError(t, err)
	infos, err := l.Inspect(ctx, "one", "two", "pool")
	require.NoError(t, err)
	require.True(t, infos[0].Held)
	require.Equal(t, a.ID(), infos[0].Holder, "one reader: its ID")
	require.True(t, infos[1].Held, "two readers")
	require.Positive(t, infos[1].TTL)
	require.False(t, infos[2].Held, "a permit is not a lock key")
	require.NoError(t, b.Release(ctx))
	require.NoError(t, a.Release(ctx))
}

// TestSharedReleaseKeepsTheLatestExpiry: a reader's release takes the key
// and its holders set down to the latest remaining reader's expiry when it
// had the latest one itself, and leaves them when another expires no
// earlier (shared_rest in batch/scripts/shared.lua). A holders set that
// grows past SKIPLIST_AT members is turned into a skiplist by the release
// that finds exactly that many holders at or after its own expiry, and
// keeps only real holders.
func TestSharedReleaseKeepsTheLatestExpiry(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			e := newEnv(t)
			l := e.locker(slotlock.Options{PerSlot: m.perSlot, TTL: time.Minute})
			ctx := ctxT(t, 30*time.Second)
			names, err := slot.NewNamer(e.prefix)
			require.NoError(t, err)
			pttl := func(k string) int64 {
				t.Helper()
				n, err := e.client.Do(ctx, e.client.B().Pttl().Key(k).Build()).AsInt64()
				require.NoError(t, err)
				return n
			}
			key := names.LockKey("r")
			set := names.SharedKeyInSlot("r", slot.KeySlot("r"))
			shared := func(ttl time.Duration) *slotlock.Lease {
				t.Helper()
				le, err := l.Acquire(ctx, slotlock.Request{Shared: []string{"r"}, TTL: ttl})
				require.NoError(t, err)
				return le
			}

			short := shared(5 * time.Second)
			long := shared(time.Minute)
			require.Greater(t, pttl(key), int64(50_000))
			require.Greater(t, pttl(set), int64(50_000))
			require.NoError(t, long.Release(ctx))
			for _, k := range []string{key, set} {
				n := pttl(k)
				require.True(t, n > 0 && n <= 5_000, "%q after the latest reader left: PTTL %d", k, n)
			}
			// The later reader stays: the earlier one's release changes no
			// expiry.
			long = shared(time.Minute)
			require.NoError(t, short.Release(ctx))
			require.Greater(t, pttl(key), int64(50_000))
			require.Greater(t, pttl(set), int64(50_000))

			// 40 readers, left in the order they came: the 9th release
			// finds 32 at or after its own expiry.
			var readers []*slotlock.Lease
			for range 39 {
				readers = append(readers, shared(time.Minute))
			}
			readers = append([]*slotlock.Lease{long}, readers...)
			for _, le := range readers[:9] {
				require.NoError(t, le.Release(ctx))
			}
			enc, err := e.client.Do(ctx, e.client.B().ObjectEncoding().Key(set).Build()).ToString()
			require.NoError(t, err)
			require.Equal(t, "skiplist", enc, "the holders set after the release that found 32 holders")
			members, err := e.client.Do(ctx, e.client.B().Zrange().Key(set).Min("0").Max("-1").Build()).AsStrSlice()
			require.NoError(t, err)
			require.Len(t, members, 31, "the 31 readers left, nothing else: %q", members)
			for _, le := range readers[9:] {
				require.NoError(t, le.Release(ctx))
			}
			require.Empty(t, e.lockKeys())
		})
	}
}
