package slotlock_test

import (
	"context"
	"os"
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

var cluster *redistest.Cluster

func TestMain(m *testing.M) { os.Exit(redistest.Main(m, redistest.Options{}, &cluster)) }

// env is one test's view of the shared cluster: its own client and its own
// key prefix, so tests can run in parallel without seeing each other's keys.
type env struct {
	t      testing.TB
	c      *redistest.Cluster
	client rueidis.Client
	prefix string
}

func newEnv(t testing.TB) *env {
	t.Helper()
	c := redistest.Require(t, cluster)
	return newEnvOn(t, c)
}

func newEnvOn(t testing.TB, c *redistest.Cluster) *env {
	t.Helper()
	client, err := c.Client()
	require.NoError(t, err)
	t.Cleanup(client.Close)
	r := strings.NewReplacer("/", ":", "{", "(", "}", ")", " ", "_")
	return &env{t: t, c: c, client: client, prefix: "t:" + r.Replace(t.Name())}
}

// modes are the two ways the engine talks to a node: one script per node
// (allow-cross-slot-keys), and one per slot. Every behaviour must hold in
// both.
var modes = []struct {
	name    string
	perSlot bool
}{{"per-node", false}, {"per-slot", true}}

// listen subscribes a client of its own to sharded channel ch until the
// test ends, as a live Locker listens on its inbox (a release hands a key
// only to a waiter by reservation someone hears: hand_off asks SPUBLISH),
// and returns what it hears; messages beyond 16 unread are dropped, for
// a test that only needs someone listening.
func (e *env) listen(ctx context.Context, ch string) <-chan string {
	e.t.Helper()
	client, err := e.c.Client()
	require.NoError(e.t, err)
	sctx, stop := context.WithCancel(ctx)
	heard, subscribed, done := make(chan string, 16), make(chan struct{}), make(chan struct{})
	var once sync.Once
	hooked := rueidis.WithOnSubscriptionHook(sctx, func(rueidis.PubSubSubscription) { once.Do(func() { close(subscribed) }) })
	go func() {
		defer close(done)
		_ = client.Receive(hooked, client.B().Ssubscribe().Channel(ch).Build(), func(m rueidis.PubSubMessage) {
			select {
			case heard <- m.Message:
			default:
			}
		})
	}()
	e.t.Cleanup(func() { stop(); client.Close(); <-done })
	select {
	case <-subscribed:
	case <-ctx.Done():
		e.t.Fatalf("no subscription to %s", ch)
	}
	return heard
}

func (e *env) locker(opt slotlock.Options) *slotlock.Locker {
	e.t.Helper()
	opt.Prefix = e.prefix
	l, err := slotlock.New(e.client, opt)
	require.NoError(e.t, err)
	e.t.Cleanup(func() { _ = l.Close() })
	return l
}

func ctxT(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// lockKeys returns every key under the test's prefix on every master, with
// its value: the ground truth of what is locked.
func (e *env) lockKeys() map[string]string {
	e.t.Helper()
	ctx := ctxT(e.t, 30*time.Second)
	masters, err := e.c.Masters(ctx)
	if err != nil || len(masters) == 0 {
		masters = e.c.Nodes() // standalone
	}
	out := map[string]string{}
	for _, m := range masters {
		cursor := "0"
		for {
			res, err := m.Do(ctx, "SCAN", cursor, "MATCH", e.prefix+"{*", "COUNT", "1000").ToArray()
			require.NoError(e.t, err)
			cursor, err = res[0].ToString()
			require.NoError(e.t, err)
			keys, err := res[1].AsStrSlice()
			require.NoError(e.t, err)
			for _, k := range keys {
				v, err := m.Do(ctx, "GET", k).ToString()
				switch {
				case err == nil:
					out[k] = v
				case rueidis.IsRedisNil(err): // expired since SCAN
				default:
					out[k] = "(not a string: " + err.Error() + ")" // a hold set
				}
			}
			if cursor == "0" {
				break
			}
		}
	}
	return out
}

// requireNoneWith fails if any lock key of the prefix carries token (or
// token with a waiter's mark).
func (e *env) requireNoneWith(token string) {
	e.t.Helper()
	for k, v := range e.lockKeys() {
		require.False(e.t, v == token || v == token+"!", "key %q still held by failed token %q", k, token)
	}
}

func redistestRequire(t testing.TB) { redistest.Require(t, cluster) }

// scriptCalls returns how many scripts (EVALSHA and EVAL) the masters ran
// since they started. Only tests that do not run in parallel can read a
// difference of it as their own.
func (e *env) scriptCalls(ctx context.Context) int64 {
	e.t.Helper()
	masters, err := e.c.Masters(ctx)
	require.NoError(e.t, err)
	var n int64
	for _, m := range masters {
		n += commandCalls(e.t, ctx, m, "evalsha") + commandCalls(e.t, ctx, m, "eval")
	}
	return n
}

// lockInBackground locks keys with l in a goroutine and releases them at
// once; the channel gets the first error, or nil. For waiters that a test
// wakes by releasing what blocks them.
func lockInBackground(ctx context.Context, l *slotlock.Locker, keys ...string) <-chan error {
	got := make(chan error, 1)
	go func() {
		lease, err := l.Lock(ctx, keys...)
		if err == nil {
			err = lease.Release(ctx)
		}
		got <- err
	}()
	return got
}

// requireExtendThenLoss checks Extend on a 100-key lease of l: every key
// gets the new expiry; after an operator deletes one key, Extend and then
// Release name that key, and nothing is left locked.
func requireExtendThenLoss(t *testing.T, e *env, l *slotlock.Locker, ctx context.Context) {
	t.Helper()
	lease, err := l.Lock(ctx, keysN("ext", 100)...)
	require.NoError(t, err)
	d0 := lease.Deadline()
	require.NoError(t, lease.Extend(ctx, time.Minute))
	require.True(t, lease.Deadline().After(d0.Add(50*time.Second)))
	names, _ := slot.NewNamer(e.prefix)
	for _, k := range lease.Keys() {
		pttl, err := e.client.Do(ctx, e.client.B().Pttl().Key(names.LockKey(k)).Build()).AsInt64()
		require.NoError(t, err)
		require.Greater(t, pttl, int64(50_000), "key %q", k)
	}
	// An operator deletes one key: Extend names it, Release too.
	victim := names.LockKey(lease.Keys()[42])
	require.NoError(t, e.client.Do(ctx, e.client.B().Del().Key(victim).Build()).Error())
	err = lease.Extend(ctx, time.Minute)
	var le *slotlock.LostError
	require.ErrorAs(t, err, &le)
	require.Equal(t, []string{lease.Keys()[42]}, le.Keys)
	err = lease.Release(ctx)
	require.ErrorAs(t, err, &le)
	require.Equal(t, []string{lease.Keys()[42]}, le.Keys)
	require.Empty(t, e.lockKeys())
}

// requireReplicaRefusal checks that strict (MinReplicas 1) refuses a
// TryLock of key and two others while key's master, at master, has its
// replica paused: ErrReplicas naming master, and the attempt rolled back.
func requireReplicaRefusal(t *testing.T, e *env, strict *slotlock.Locker, ctx context.Context, key, master string) {
	t.Helper()
	var failed []string
	strict.SetAfterFailure(func(token string, _ error) { failed = append(failed, token) })
	_, err := strict.TryLock(ctx, key, "other:1", "other:2")
	require.ErrorIs(t, err, slotlock.ErrReplicas)
	var re *slotlock.ReplicaError
	require.ErrorAs(t, err, &re)
	require.Equal(t, master, re.Shortfalls[0].Node)
	require.Len(t, failed, 1)
	require.Empty(t, e.lockKeys(), "rolled back")
}
