package tracking_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/slotlock/slotlock/internal/redistest"
)

var cluster *redistest.Cluster

func TestMain(m *testing.M) { os.Exit(redistest.Main(m, redistest.Options{}, &cluster)) }

// pushes collects the invalidation pushes of one connection. A nil slice
// (a flush, or the connection's end) is recorded as the key "<nil>".
type pushes struct {
	mu   sync.Mutex
	got  []string
	more chan struct{}
}

func newPushes() *pushes { return &pushes{more: make(chan struct{}, 1)} }

func (p *pushes) on(msgs []rueidis.RedisMessage) {
	p.mu.Lock()
	if msgs == nil {
		p.got = append(p.got, "<nil>")
	}
	for _, m := range msgs {
		s, _ := m.ToString()
		p.got = append(p.got, s)
	}
	p.mu.Unlock()
	select {
	case p.more <- struct{}{}:
	default:
	}
}

func (p *pushes) take() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := p.got
	p.got = nil
	return out
}

// conn is one connection to one node with its own tracking mode.
type conn struct {
	t  *testing.T
	dc rueidis.DedicatedClient
	p  *pushes
}

// dial opens a connection to addr; with track it turns tracking on with
// the given options first.
func dial(t *testing.T, addr string, track bool, opts ...string) *conn {
	t.Helper()
	cl, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, ForceSingleClient: true, DisableCache: true})
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	dc, release := cl.Dedicate()
	t.Cleanup(release)
	c := &conn{t: t, dc: dc, p: newPushes()}
	if track {
		dc.SetOnInvalidations(c.p.on)
		c.do(append([]string{"CLIENT", "TRACKING", "ON"}, opts...)...)
	}
	return c
}

func (c *conn) do(args ...string) rueidis.RedisMessage {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	m, err := c.dc.Do(ctx, c.dc.B().Arbitrary(args...).Build()).ToMessage()
	if err != nil && !rueidis.IsRedisNil(err) {
		require.NoError(c.t, err, "%v", args)
	}
	return m
}

// fence makes every invalidation the server owes this connection arrive
// before it returns: pushes travel on the connection before the reply of a
// later command.
func (c *conn) fence() []string {
	c.do("PING")
	return c.p.take()
}

// versionBefore reports whether version ("7.0.15") is older than
// major.minor.
func versionBefore(t *testing.T, version string, major, minor int) bool {
	t.Helper()
	parts := strings.SplitN(version, ".", 3)
	if len(parts) < 2 {
		t.Fatalf("version %q: want major.minor", version)
	}
	maj, err1 := strconv.Atoi(parts[0])
	mnr, err2 := strconv.Atoi(parts[1])
	if err1 != nil || err2 != nil {
		t.Fatalf("version %q: want major.minor", version)
	}
	return maj < major || maj == major && mnr < minor
}

// TestServerTrackingSemantics records, on the server under test, the
// behaviours of RESP3 client tracking that the lost-lease tracker relies
// on or had to avoid (docs/design.md, "Seeing a lost lease at once").
func TestServerTrackingSemantics(t *testing.T) {
	c := redistest.Require(t, cluster)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	masters, err := c.Masters(ctx)
	require.NoError(t, err)
	node := masters[0]
	addr := node.Addr()
	// Keys of slots that node serves: a hash tag per slot found by asking it.
	var keys []string
	for i := 0; len(keys) < 4; i++ {
		k := "trk:" + strconv.Itoa(i)
		if err := node.Do(ctx, "EXISTS", k).Error(); err == nil {
			keys = append(keys, k)
		}
	}
	writer := dial(t, addr, false)
	for _, k := range keys {
		writer.do("DEL", k)
	}

	t.Run("default mode: a GET registers, another client's SET invalidates once", func(t *testing.T) {
		tr := dial(t, addr, true)
		tr.do("GET", keys[0]) // the key does not even exist
		writer.do("SET", keys[0], "v")
		require.Equal(t, []string{keys[0]}, waitPushes(t, tr, 1))
		writer.do("SET", keys[0], "w") // registration was consumed
		require.Empty(t, tr.fence())
	})

	t.Run("what a script registers depends on the server", func(t *testing.T) {
		// Redis 7.0 registers the keys a script DECLARES (once it runs a
		// read), never the undeclared ones it reads; later servers
		// register the keys it reads (seen on Valkey 8.0.1 and Redis
		// 7.4.1; Valkey forked from Redis 7.2.4, so 7.2 is taken as the
		// change, unchecked on a 7.2 server). The Tracker relies on
		// neither: it reads the keys itself (package comment).
		srv, err := c.Server(ctx)
		require.NoError(t, err)
		tr := dial(t, addr, true, "NOLOOP")
		writer.do("SET", keys[1], "v")
		writer.do("SET", keys[2], "v")
		// Declares keys[1]; reads only keys[2], passed as an argument
		// (allowed for a script without a shebang when the slot is local).
		tr.do("EVAL", "return redis.call('GET', ARGV[1])", "1", keys[1], keys[2])
		writer.do("PEXPIRE", keys[1], "60000")
		writer.do("DEL", keys[2])
		want := []string{keys[2]}
		if srv.Name == "redis" && versionBefore(t, srv.Version, 7, 2) {
			want = []string{keys[1]}
		}
		require.Equal(t, want, waitPushes(t, tr, 1), "%v", srv)
		require.Empty(t, tr.fence())
		// A script that only writes registers nothing.
		tr.do("EVAL", "return redis.call('PEXPIRE', KEYS[1], 60000)", "1", keys[1])
		writer.do("PEXPIRE", keys[1], "60000")
		require.Empty(t, tr.fence())
	})

	t.Run("OPTIN: script reads count only after CLIENT CACHING YES", func(t *testing.T) {
		tr := dial(t, addr, true, "OPTIN")
		writer.do("SET", keys[1], "v")
		tr.do("EVAL", "return redis.call('GET', KEYS[1])", "1", keys[1])
		writer.do("SET", keys[1], "w")
		require.Empty(t, tr.fence(), "no CACHING YES: not tracked")
		tr.do("CLIENT", "CACHING", "YES")
		tr.do("EVAL", "return redis.call('GET', KEYS[1])", "1", keys[1])
		writer.do("SET", keys[1], "x")
		require.Equal(t, []string{keys[1]}, waitPushes(t, tr, 1))
	})

	t.Run("a write alone registers nothing", func(t *testing.T) {
		tr := dial(t, addr, true)
		tr.do("SET", keys[3], "mine", "PX", "60000")
		writer.do("DEL", keys[3])
		require.Empty(t, tr.fence())
	})

	t.Run("own write: invalidates itself without NOLOOP; with NOLOOP it silently unregisters", func(t *testing.T) {
		loop := dial(t, addr, true)
		loop.do("GET", keys[0])
		loop.do("SET", keys[0], "mine")
		require.Equal(t, []string{keys[0]}, loop.fence())

		noloop := dial(t, addr, true, "NOLOOP")
		noloop.do("GET", keys[0])
		noloop.do("SET", keys[0], "mine2")
		require.Empty(t, noloop.fence(), "NOLOOP: no push for its own write")
		writer.do("DEL", keys[0])
		require.Empty(t, noloop.fence(), "and the key is no longer tracked")
	})

	t.Run("expiry and FLUSHALL", func(t *testing.T) {
		tr := dial(t, addr, true, "NOLOOP")
		writer.do("SET", keys[1], "v", "PX", "30")
		tr.do("GET", keys[1])
		require.Equal(t, []string{keys[1]}, waitPushes(t, tr, 1), "the server's expiry of the key")
		tr.do("GET", keys[2])
		writer.do("FLUSHALL")
		require.Equal(t, []string{"<nil>"}, waitPushes(t, tr, 1), "a flush is one nil invalidation")
	})

	t.Run("a killed connection reports nil", func(t *testing.T) {
		tr := dial(t, addr, true, "NOLOOP")
		id := tr.do("CLIENT", "ID")
		n, _ := id.AsInt64()
		writer.do("CLIENT", "KILL", "ID", strconv.FormatInt(n, 10))
		require.Eventually(t, func() bool {
			tr.p.mu.Lock()
			defer tr.p.mu.Unlock()
			return len(tr.p.got) > 0 && tr.p.got[0] == "<nil>"
		}, 2*time.Second, time.Millisecond)
	})
}

func waitPushes(t *testing.T, c *conn, n int) []string {
	t.Helper()
	var got []string
	deadline := time.Now().Add(3 * time.Second)
	for len(got) < n && time.Now().Before(deadline) {
		got = append(got, c.fence()...)
		if len(got) < n {
			select {
			case <-c.p.more:
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
	return got
}

// TestTrackingMemory measures what the tracking table costs the server:
// one connection registers n lock-sized keys, and used_memory grows by
// the reported bytes. Run with -v; it asserts only an upper bound.
func TestTrackingMemory(t *testing.T) {
	c := redistest.Require(t, cluster)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	masters, err := c.Masters(ctx)
	require.NoError(t, err)
	node := masters[0]
	tr := dial(t, node.Addr(), true, "NOLOOP")
	const n = 100_000
	// Keys of the lock-key shape (prefix, tag, user key) in slots of this
	// node: one tag that node serves, so that no read is refused.
	var tag string
	for i := 0; ; i++ {
		tag = strconv.Itoa(i)
		if err := node.Do(ctx, "EXISTS", "slotlock{"+tag+"}:x").Error(); err == nil {
			break
		}
	}
	used := func() int64 {
		info, err := node.Info(ctx, "memory")
		require.NoError(t, err)
		return field(t, info, "used_memory")
	}
	before := used()
	const batch = 1000
	for i := 0; i < n; i += batch {
		cmds := make(rueidis.Commands, 0, batch)
		for j := i; j < i+batch; j++ {
			cmds = append(cmds, tr.dc.B().Get().Key(fmt.Sprintf("slotlock{%s}:user:key:%07d", tag, j)).Build())
		}
		for _, r := range tr.dc.DoMulti(ctx, cmds...) {
			require.True(t, r.Error() == nil || rueidis.IsRedisNil(r.Error()), "%v", r.Error())
		}
	}
	after := used()
	stats, err := node.Info(ctx, "stats")
	require.NoError(t, err)
	keys := field(t, stats, "tracking_total_keys")
	require.GreaterOrEqual(t, keys, int64(n))
	per := float64(after-before) / n
	t.Logf("tracking %d keys of %d bytes: used_memory +%d bytes, %.0f bytes per key (tracking_total_keys %d)",
		n, len("slotlock{"+tag+"}:user:key:0000000"), after-before, per, keys)
	require.Less(t, per, 1000.0)
	require.NoError(t, tr.dc.Do(ctx, tr.dc.B().Arbitrary("CLIENT", "TRACKING", "OFF").Build()).Error())
}

func field(t *testing.T, info, name string) int64 {
	t.Helper()
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			require.NoError(t, err)
			return n
		}
	}
	t.Fatalf("no %s in INFO", name)
	return 0
}
