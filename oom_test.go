package slotlock_test

import (
	"context"
	"errors"
	"maps"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/slotlock/slotlock"
	"github.com/slotlock/slotlock/internal/redistest"
	"github.com/slotlock/slotlock/slot"
)

// TestOutOfMemory: a server over maxmemory (noeviction) refuses new locks
// with a typed error that names it, and writes nothing; but releases and
// renewals still run, so a full server does not keep locks alive until
// their TTL. (Redis refuses a script with a shebang outright when over
// maxmemory unless the script declares allow-oom: release and extend do,
// acquire does not.) A server of its own: maxmemory is server-wide.
func TestOutOfMemory(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t, 120*time.Second)
	c := redistest.StartStandaloneForTest(t, redistest.Options{})
	node := c.Nodes()[0]
	type variant struct {
		name string
		opt  slotlock.Options
	}
	variants := []variant{{"pipeline", slotlock.Options{Strategy: slotlock.StrategyPipeline}}}
	for _, m := range modes {
		variants = append(variants, variant{m.name, slotlock.Options{PerSlot: m.perSlot}})
	}
	for _, m := range variants {
		t.Run(m.name, func(t *testing.T) {
			e := newEnvOn(t, c)
			names, err := slot.NewNamer(e.prefix)
			require.NoError(t, err)
			opt := m.opt
			opt.TTL = 30 * time.Second
			l := e.locker(opt)
			many, err := l.Lock(ctx, keysN(m.name+":many", 50)...)
			require.NoError(t, err)
			one, err := l.Lock(ctx, m.name+":one") // the one-key path: a bare SET
			require.NoError(t, err)
			want := 51
			var held *slotlock.Lease
			if m.opt.Strategy != slotlock.StrategyPipeline {
				// A reentrant lease keeps a hold set beside its key.
				held, err = l.Lock(slotlock.WithOwner(ctx, "me"), m.name+":owned")
				require.NoError(t, err)
				want += 2
			}
			before := e.lockKeys()
			require.Len(t, before, want)

			giveBack := fillMemory(t, ctx, node)

			// Another Locker: its attempts reach Redis (no in-process queue
			// between the two), some over keys l holds.
			other := e.locker(opt)

			for _, keys := range [][]string{{"new"}, {"new", "other"}, keysN(m.name+":many", 60)} {
				_, err = other.TryLock(ctx, keys...)
				require.ErrorIs(t, err, slotlock.ErrRedis, "TryLock %d keys", len(keys))
				require.ErrorContains(t, err, "OOM")
				requireNamesNode(t, err, node.Addr())
				// Lock does not wait for memory: an OOM is not transient.
				_, err = other.Lock(ctx, keys...)
				require.ErrorIs(t, err, slotlock.ErrRedis, "Lock %d keys", len(keys))
				require.Equal(t, before, e.lockKeys(), "a refused lock wrote nothing")
			}

			if m.opt.Strategy == slotlock.StrategyPipeline {
				// Without scripts the owner check is an optimistic
				// transaction. Whether the server runs a DEL or PEXPIRE
				// queued in MULTI over maxmemory is the server's choice,
				// asked of it here: Redis 7.0 refuses every queued
				// command, Redis 7.2+ and Valkey only the deny-oom ones
				// (docs/compatibility.md). The property is the same
				// either way: a refused call is typed, names the node and
				// wrote nothing; an accepted one did exactly its work.
				refuses := multiRefusedOverMemory(t, ctx, e)
				t.Logf("%s: DEL queued in MULTI over maxmemory refused: %v", server(t, ctx, c), refuses)
				err = many.Extend(ctx, 20*time.Second)
				if refuses {
					require.ErrorIs(t, err, slotlock.ErrRedis)
					require.ErrorContains(t, err, "OOM")
					require.ErrorContains(t, err, node.Addr())
				} else {
					require.NoError(t, err, "extend over maxmemory")
					requireTTLAtMost(t, ctx, node, names, keysN(m.name+":many", 50), 20_000)
				}
				err = one.Release(ctx)
				if refuses {
					require.ErrorIs(t, err, slotlock.ErrRedis)
					require.ErrorContains(t, err, node.Addr())
					require.Equal(t, before, e.lockKeys(), "a refused release and extend wrote nothing")
				} else {
					require.NoError(t, err, "release over maxmemory")
					gone := maps.Clone(before)
					delete(gone, names.LockKey(m.name+":one"))
					require.Equal(t, gone, e.lockKeys(), "the release deleted its key and nothing else")
				}
				// Either way the lease has ended: a failed release stops
				// its renewal, so its key expires by its TTL.
				select {
				case <-one.Done():
				default:
					t.Fatal("a lease whose release returned is still renewed")
				}
				giveBack()
				require.NoError(t, one.Release(ctx), "idempotent")
				if refuses {
					ttl, err := node.Do(ctx, "PTTL", names.LockKey(m.name+":one")).AsInt64()
					require.NoError(t, err)
					require.Positive(t, ttl, "left to expire")
					require.NoError(t, node.Do(ctx, "DEL", names.LockKey(m.name+":one")).Error())
				}
			}
			require.NoError(t, many.Extend(ctx, 20*time.Second), "extend")
			ttl, err := node.Do(ctx, "PTTL", names.LockKey(m.name+":many:7")).AsInt64()
			require.NoError(t, err)
			require.LessOrEqual(t, ttl, int64(20_000), "the extension took effect")
			require.NoError(t, many.Release(ctx), "release")
			require.NoError(t, one.Release(ctx), "release of the bare-SET key (pipeline: a no-op now)")
			if held != nil {
				require.NoError(t, held.Release(ctx), "release of a reentrant hold")
			}
			require.Empty(t, e.lockKeys())
		})
	}
}

// fillMemory writes ballast and sets maxmemory below the node's use, with
// noeviction. The function it returns gives the memory back; the test's
// cleanup calls it too.
func fillMemory(t *testing.T, ctx context.Context, n *redistest.Node) func() {
	t.Helper()
	ballast := strings.Repeat("x", 100_000)
	for i := range 30 {
		require.NoError(t, n.Do(ctx, "SET", "ballast:"+strconv.Itoa(i), ballast).Error())
	}
	require.NoError(t, n.Do(ctx, "CONFIG", "SET", "maxmemory-policy", "noeviction").Error())
	require.NoError(t, n.Do(ctx, "CONFIG", "SET", "maxmemory", "1mb").Error())
	var once sync.Once
	giveBack := func() {
		once.Do(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			require.NoError(t, n.Do(ctx, "CONFIG", "SET", "maxmemory", "0").Error())
			for i := range 30 {
				require.NoError(t, n.Do(ctx, "DEL", "ballast:"+strconv.Itoa(i)).Error())
			}
		})
	}
	t.Cleanup(giveBack)
	err := n.Do(ctx, "SET", "probe", "x").Error()
	require.ErrorContains(t, err, "OOM", "the node is over maxmemory")
	return giveBack
}

// multiRefusedOverMemory asks the server, which must be over maxmemory,
// whether it refuses a DEL queued in MULTI. The key does not exist: the
// transaction writes nothing either way.
func multiRefusedOverMemory(t *testing.T, ctx context.Context, e *env) bool {
	t.Helper()
	var refused bool
	err := e.client.Dedicated(func(d rueidis.DedicatedClient) error {
		b := d.B()
		res := d.DoMulti(ctx, b.Multi().Build(), b.Del().Key(e.prefix+":oom-probe").Build(), b.Exec().Build())
		if err := res[0].Error(); err != nil {
			return err
		}
		qerr := res[1].Error()
		refused = qerr != nil && strings.HasPrefix(qerr.Error(), "OOM")
		if qerr != nil && !refused {
			return qerr
		}
		return nil
	})
	require.NoError(t, err, "MULTI DEL EXEC over maxmemory")
	return refused
}

// requireTTLAtMost checks that every user key's lock key lives and expires
// within ms milliseconds.
func requireTTLAtMost(t *testing.T, ctx context.Context, n *redistest.Node, names slot.Namer, keys []string, ms int64) {
	t.Helper()
	for _, k := range keys {
		ttl, err := n.Do(ctx, "PTTL", names.LockKey(k)).AsInt64()
		require.NoError(t, err)
		require.Positive(t, ttl, "%s is still held", k)
		require.LessOrEqual(t, ttl, ms, "%s has the new expiry", k)
	}
}

// server names the server c runs, for test logs.
func server(t *testing.T, ctx context.Context, c *redistest.Cluster) redistest.Server {
	t.Helper()
	s, err := c.Server(ctx)
	require.NoError(t, err)
	return s
}

func requireNamesNode(t *testing.T, err error, addr string) {
	t.Helper()
	var ne *slotlock.NodeError
	require.True(t, errors.As(err, &ne), "%v", err)
	require.Equal(t, addr, ne.Node)
}
