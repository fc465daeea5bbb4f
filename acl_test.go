package slotlock_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/slotlock/slotlock"
	"github.com/slotlock/slotlock/internal/lockval"
	"github.com/slotlock/slotlock/internal/redistest"
	"github.com/slotlock/slotlock/slot"
)

// aclRules are the ACL rules of a user that can do everything slotlock
// does under the prefix "app" (docs/acl.md lists them with the reason for
// each; keep the two together).
var aclRules = []string{
	"resetkeys", "~app*", "resetchannels", "&app*", "-@all",
	"+hello", "+auth", "+ping", "+client|tracking", "+client|id", "+readonly",
	"+cluster|shards", "+cluster|slots", "+cluster|info", "+command|info",
	"+evalsha", "+eval",
	"+set", "+get", "+del", "+pexpire", "+pttl", "+wait",
	"+multi", "+exec", "+watch", "+unwatch",
	"+time", "+zadd", "+zrem", "+zrange", "+zcard",
	"+hset", "+hdel", "+hlen", "+hexists",
	"+zscore", "+zcount", "+zremrangebyscore", "+pexpireat", "+pexpiretime", "+hgetall",
	"+spublish", "+ssubscribe", "+sunsubscribe", "+pubsub|shardnumsub",
	"+unsubscribe", "+punsubscribe", "+discard",
}

// setUser creates (or replaces) an ACL user on every node of c: ACLs are
// per node, and a failover must not find a node without the user.
//
// Where the server has CLIENT SETINFO (Redis 7.2+, Valkey), the user also
// gets +client|setinfo, as docs/acl.md says: rueidis sends it on every
// new connection and, refused, fills the ACL LOG (TestTLSAndACL failed on
// that log on Valkey 8.0.1 and Redis 7.4.1 without it). Redis 7.0 has no
// such command and refuses the rule. Mutation: never adding it fails
// TestTLSAndACL's ACL LOG check on those servers.
func setUser(t *testing.T, ctx context.Context, c *redistest.Cluster, name string, rules ...string) {
	t.Helper()
	if hasClientSetInfo(t, ctx, c) {
		rules = append(rules, "+client|setinfo")
	}
	for _, n := range c.Nodes() {
		args := append([]string{"ACL", "SETUSER", name, "reset", "on", ">pw-" + name}, rules...)
		require.NoError(t, n.Do(ctx, args...).Error(), "on %s", n.Addr())
	}
}

// hasClientSetInfo asks the server whether it knows CLIENT SETINFO:
// COMMAND INFO answers nil for a command it does not have.
func hasClientSetInfo(t *testing.T, ctx context.Context, c *redistest.Cluster) bool {
	t.Helper()
	infos, err := c.Nodes()[0].Do(ctx, "COMMAND", "INFO", "CLIENT|SETINFO").ToArray()
	require.NoError(t, err)
	require.Len(t, infos, 1)
	return !infos[0].IsNil()
}

// userClient is a cluster client over TLS that logs in as name.
func userClient(t *testing.T, c *redistest.Cluster, name string) rueidis.Client {
	t.Helper()
	cl, err := c.Client(func(o *rueidis.ClientOption) {
		o.Username, o.Password = name, "pw-"+name
	})
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	return cl
}

// aclDenials returns the ACL LOG entries of user on every node, as
// "reason object" strings: a command, key or channel refused, even inside
// a protected call (the scripts' SPUBLISH), shows up here.
func aclDenials(t *testing.T, ctx context.Context, c *redistest.Cluster, user string) []string {
	t.Helper()
	var out []string
	for _, n := range c.Nodes() {
		entries, err := n.Do(ctx, "ACL", "LOG").ToArray()
		require.NoError(t, err)
		for _, e := range entries {
			m, err := e.AsStrMap()
			require.NoError(t, err)
			if m["username"] == user {
				out = append(out, n.Addr()+": "+m["reason"]+" "+m["object"]+" ("+m["context"]+")")
			}
		}
	}
	return out
}

// TestTLSAndACL runs the lock path over TLS as an ACL user limited to the
// prefix's keys and channels and the commands of docs/acl.md: plain and
// fenced batches in both script modes, renewal, a waiter woken through
// its sharded channel, the pipeline strategy, reentrant holds and a
// guarded write; the ACL LOG of every
// node must show no refusal. A user short of one permission gets
// ErrPermission with the command named. Mutation: dropping "+cluster|info"
// from aclRules fails the fenced lock (and names the command).
//
// Not parallel: its own six-node cluster and its renewals would
// compete for the CPU with the shared cluster's timing-bound tests (a
// 150 ms waiter in TestWaiterKeepsItsPrefix lost its prefix once when
// both ran together on a loaded machine).
func TestTLSAndACL(t *testing.T) {
	ctx := ctxT(t, 3*time.Minute)
	c := redistest.StartForTest(t, redistest.Options{TLS: true})
	setUser(t, ctx, c, "app", aclRules...)
	cl := userClient(t, c, "app")
	names, err := slot.NewNamer("app")
	require.NoError(t, err)
	keys := keysN("acl", 40)
	newLocker := func(o slotlock.Options) *slotlock.Locker {
		o.Prefix = "app"
		l, err := slotlock.New(cl, o)
		require.NoError(t, err)
		t.Cleanup(func() { _ = l.Close() })
		return l
	}

	for _, o := range []slotlock.Options{
		{Strategy: slotlock.StrategyLua},
		{Strategy: slotlock.StrategyLua, PerSlot: true},
		{Strategy: slotlock.StrategyLua, Fencing: true},
		{Strategy: slotlock.StrategyPipeline},
	} {
		name := o.Strategy.String()
		if o.PerSlot {
			name += "/per-slot"
		}
		if o.Fencing {
			name += "/fencing"
		}
		// A renewal round is due at TTL/3 and must land within the TTL:
		// a long TTL leaves a loaded machine room, and the test waits for
		// the renewal, not for a time.
		o.TTL = 9 * time.Second
		a, b := newLocker(o), newLocker(o)

		// Lock, renewal: the watchdog moves the Deadline on, still held.
		la, err := a.Lock(ctx, keys...)
		require.NoError(t, err, name)
		if o.Fencing {
			tok, ok := la.FencingToken(keys[0])
			require.True(t, ok)
			require.Greater(t, tok, int64(1)<<32, name)
		}
		granted := la.Deadline()
		require.Eventually(t, func() bool { return la.Deadline().After(granted) || la.Err() != nil },
			time.Minute, 10*time.Millisecond, "%s: no renewal", name)
		require.NoError(t, la.Err(), "%s: renewal over TLS as the ACL user; ACL LOG: %v", name, aclDenials(t, ctx, c, "app"))
		v, err := cl.Do(ctx, cl.B().Get().Key(names.LockKey(keys[7])).Build()).ToString()
		require.NoError(t, err)
		require.True(t, strings.HasPrefix(v, la.Token()), name)

		// A conflict, then a waiter woken when the holder releases.
		_, err = b.TryLock(ctx, keys[3], "acl:free")
		require.ErrorIs(t, err, slotlock.ErrNotAcquired, name)
		got := lockInBackground(ctx, b, keys[5], keys[6])
		if o.Strategy == slotlock.StrategyLua {
			// A waiter by reservation (per-node and per-slot calls)
			// listens on its Locker's inbox, which its queue entry names
			// (lockval.QueueEntry): SSUBSCRIBE went through.
			var ch string
			q := names.QueueKeyInSlot(keys[5], slot.KeySlot(keys[5]))
			require.Eventually(t, func() bool {
				members, err := cl.Do(ctx, cl.B().Zrange().Key(q).Min("0").Max("-1").Build()).AsStrSlice()
				for _, m := range members {
					if x := lockval.QueueEntry(m); err == nil && x.Inbox != "" {
						ch = x.Inbox
						return true
					}
				}
				return false
			}, 10*time.Second, 10*time.Millisecond, "%s: the waiter never stood in line", name)
			require.Eventually(t, func() bool {
				n, err := c.NodeForSlot(ctx, slot.KeySlot(ch))
				if err != nil {
					return false
				}
				r, err := n.Do(ctx, "PUBSUB", "SHARDNUMSUB", ch).ToArray()
				if err != nil || len(r) < 2 {
					return false
				}
				subs, _ := r[1].AsInt64()
				return subs > 0
			}, 10*time.Second, 10*time.Millisecond, "%s: no subscriber on %s", name, ch)
		}
		require.NoError(t, la.Release(ctx), name)
		require.NoError(t, <-got, name)
	}
	// Reentrant holds (hold sets) and a guarded write on a user key under
	// the prefix.
	r := newLocker(slotlock.Options{Strategy: slotlock.StrategyLua, TTL: 10 * time.Second})
	octx := slotlock.WithOwner(ctx, "job-1")
	h1, err := r.Lock(octx, keys[:5]...)
	require.NoError(t, err)
	h2, err := r.Lock(octx, keys[2:8]...)
	require.NoError(t, err, "reentrant")
	require.NoError(t, h1.Release(ctx))
	require.NoError(t, h2.Release(ctx))
	g, err := r.Lock(ctx, "app:order")
	require.NoError(t, err)
	_, err = g.Guard(ctx, []string{"app:order"}, "SET", "app:order", "paid")
	require.NoError(t, err, "guarded write")
	require.NoError(t, g.Release(ctx))
	v, err := cl.Do(ctx, cl.B().Get().Key("app:order").Build()).ToString()
	require.NoError(t, err)
	require.Equal(t, "paid", v)
	require.NoError(t, cl.Do(ctx, cl.B().Del().Key("app:order").Build()).Error())

	// Shared keys (two readers: the holders set; a join, a renewal, the
	// releases), a writer waiting behind them, permits, and both
	// inspections (docs/design.md, "Shared keys and permits").
	req := slotlock.Request{Shared: keys[:3], Permits: []slotlock.Permit{{Resource: "acl:pool", Units: 1, Limit: 2}}}
	s1, err := r.Acquire(ctx, req)
	require.NoError(t, err, "shared keys and permits; ACL LOG: %v", aclDenials(t, ctx, c, "app"))
	s2, err := r.Acquire(ctx, req)
	require.NoError(t, err, "a second reader")
	require.NoError(t, s1.Extend(ctx, 20*time.Second), "renewal of shared keys and permits")
	infos, err := r.Inspect(ctx, keys[0])
	require.NoError(t, err)
	require.Equal(t, 2, infos[0].Holds)
	pinfos, err := r.InspectPermits(ctx, "acl:pool")
	require.NoError(t, err)
	require.Equal(t, int64(2), pinfos[0].Used)
	wGot := make(chan error, 1)
	go func() {
		w, err := newLocker(slotlock.Options{TTL: 10 * time.Second}).Lock(ctx, keys[0])
		if err == nil {
			err = w.Release(ctx)
		}
		wGot <- err
	}()
	require.Eventually(t, func() bool {
		v, _ := cl.Do(ctx, cl.B().Get().Key(names.LockKey(keys[0])).Build()).ToString()
		return strings.HasSuffix(v, "!")
	}, 10*time.Second, time.Millisecond, "the writer never marked the shared key")
	require.NoError(t, s1.Release(ctx))
	require.NoError(t, s2.Release(ctx))
	require.NoError(t, <-wGot, "the writer after the readers")

	require.Empty(t, aclDenials(t, ctx, c, "app"), "ACL LOG of the user")

	// Users short of one permission: the error says which command. PTTL
	// runs only inside the acquire script (when a key is held), where
	// Redis names no command: the engine reads it off the script's line.
	// Mutation: explainDenial returning err unchanged fails the PTTL case.
	holder := newLocker(slotlock.Options{TTL: 10 * time.Second})
	held, err := holder.TryLock(ctx, keys[0])
	require.NoError(t, err)
	for _, tc := range []struct {
		drop, want string
		opt        slotlock.Options
	}{
		{"+cluster|info", "CLUSTER INFO", slotlock.Options{Strategy: slotlock.StrategyLua, Fencing: true}},
		{"+evalsha", "evalsha", slotlock.Options{Strategy: slotlock.StrategyLua}},
		{"+multi", "multi", slotlock.Options{Strategy: slotlock.StrategyPipeline}},
		{"+pttl", "PTTL, line", slotlock.Options{Strategy: slotlock.StrategyLua}},
	} {
		var rules []string
		for _, r := range aclRules {
			if r != tc.drop {
				rules = append(rules, r)
			}
		}
		user := "short-" + strings.NewReplacer("+", "", "|", "-").Replace(tc.drop)
		setUser(t, ctx, c, user, rules...)
		tc.opt.Prefix, tc.opt.TTL = "app", time.Second
		l, err := slotlock.New(userClient(t, c, user), tc.opt)
		require.NoError(t, err)
		own := keysN(user, 8)
		batch := own
		if tc.drop == "+pttl" {
			batch = append(batch, keys[0]) // held: the script asks its PTTL
		}
		le, err := l.TryLock(ctx, batch...)
		if err == nil && tc.opt.Strategy == slotlock.StrategyPipeline {
			// The pipeline strategy's release is where MULTI runs; its
			// keys then expire by their TTL (1 s here).
			err = le.Release(ctx)
			for _, k := range own {
				pttl, perr := cl.Do(ctx, cl.B().Pttl().Key(names.LockKey(k)).Build()).AsInt64()
				require.NoError(t, perr)
				require.LessOrEqual(t, pttl, int64(1000), k)
			}
		} else {
			for _, k := range own {
				pttl, err := cl.Do(ctx, cl.B().Pttl().Key(names.LockKey(k)).Build()).AsInt64()
				require.NoError(t, err)
				require.Equal(t, int64(-2), pttl, "%s: %s left", tc.drop, k)
			}
		}
		t.Logf("without %s: %v", tc.drop, err)
		require.ErrorIs(t, err, slotlock.ErrPermission, tc.drop)
		require.ErrorContains(t, err, tc.want, tc.drop)
		require.NoError(t, l.Close())
	}
	require.NoError(t, held.Release(ctx))
	// Nothing left locked by anyone.
	for _, k := range keys {
		pttl, err := cl.Do(ctx, cl.B().Pttl().Key(names.LockKey(k)).Build()).AsInt64()
		require.NoError(t, err)
		require.Equal(t, int64(-2), pttl, k)
	}
}
