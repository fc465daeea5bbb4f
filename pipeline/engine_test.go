package pipeline

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/slotlock/slotlock/internal/protocol"
	"github.com/slotlock/slotlock/internal/redistest"
	"github.com/slotlock/slotlock/internal/topology"
	"github.com/slotlock/slotlock/slot"
)

var cluster *redistest.Cluster

func TestMain(m *testing.M) { os.Exit(redistest.Main(m, redistest.Options{}, &cluster)) }

// rig is one test's engine on the shared cluster, with its own key prefix.
type rig struct {
	t      *testing.T
	client rueidis.Client
	eng    *Engine
	names  slot.Namer
	ctx    context.Context
}

func newRig(t *testing.T, wrap func(rueidis.Client) rueidis.Client) *rig {
	t.Helper()
	c := redistest.Require(t, cluster)
	client, err := c.Client()
	require.NoError(t, err)
	t.Cleanup(client.Close)
	var cl rueidis.Client = client
	if wrap != nil {
		cl = wrap(client)
	}
	// A prefix of its own per run: some tests leave other owners' keys
	// behind, and -count reruns on the same cluster.
	prefix := fmt.Sprintf("p:%s:%d", strings.NewReplacer("/", ":", "{", "(", "}", ")").Replace(t.Name()), time.Now().UnixNano())
	names, err := slot.NewNamer(prefix)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return &rig{t: t, client: client, eng: New(cl, topology.New(cl)), names: names, ctx: ctx}
}

func (g *rig) set(keys ...string) *protocol.Set { return protocol.NewSet(g.names, keys) }

func (g *rig) req(token string, ttl time.Duration) *protocol.Request {
	return &protocol.Request{Who: protocol.Who{Holder: token}, TTL: ttl, CleanupTimeout: 5 * time.Second}
}

// releaseOn and extendOn are the engine's Release and Extend with their
// result as (lost, err).
func releaseOn(e *Engine, ctx context.Context, set *protocol.Set, idx []int, who protocol.Who) ([]int, error) {
	r := e.Release(ctx, set, idx, who)
	return r.Lost, r.Err
}

func extendOn(e *Engine, ctx context.Context, set *protocol.Set, who protocol.Who, ttl time.Duration) ([]int, error) {
	r := e.Extend(ctx, set, nil, who, ttl)
	return r.Lost, r.Err
}

// values reads every lock key of set: "" for a missing key.
func (g *rig) values(set *protocol.Set) []string {
	g.t.Helper()
	cmds := make(rueidis.Commands, set.Len())
	for i, k := range set.Lock {
		cmds[i] = g.client.B().Get().Key(k).Build()
	}
	out := make([]string, set.Len())
	for i, r := range g.client.DoMulti(g.ctx, cmds...) {
		v, err := r.ToString()
		if !rueidis.IsRedisNil(err) {
			require.NoError(g.t, err)
		}
		out[i] = v
	}
	return out
}

func (g *rig) pttl(key string) int64 {
	g.t.Helper()
	v, err := g.client.Do(g.ctx, g.client.B().Pttl().Key(key).Build()).AsInt64()
	require.NoError(g.t, err)
	return v
}

func keysN(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s:%d", prefix, i)
	}
	return out
}

func TestWaitForIsBoundedByTheHolder(t *testing.T) {
	for attempt := range 20 {
		d := waitFor(-1, attempt)
		assert.GreaterOrEqual(t, d, protocol.MinWait/2)
		assert.LessOrEqual(t, d, protocol.MaxWait)
		assert.LessOrEqual(t, waitFor(3*time.Millisecond, attempt), 4*time.Millisecond)
		assert.Equal(t, time.Millisecond, waitFor(0, attempt))
	}
	assert.LessOrEqual(t, waitFor(-1, 0), protocol.MinWait)
}

func TestTryLockAndRelease(t *testing.T) {
	t.Parallel()
	g := newRig(t, nil)
	set := g.set(keysN("k", 300)...)
	grant, err := protocol.TryLock(g.ctx, g.eng, set, g.req("tokA", 10*time.Second))
	require.NoError(t, err)
	assert.WithinDuration(t, time.Now().Add(10*time.Second), grant.Deadline, time.Second)
	for i, v := range g.values(set) {
		require.Equal(t, "tokA", v, "key %d", i)
	}
	assert.LessOrEqual(t, g.pttl(set.Lock[0]), int64(10_000))
	assert.Greater(t, g.pttl(set.Lock[0]), int64(5_000))

	lost, err := releaseOn(g.eng, g.ctx, set, nil, protocol.Who{Holder: "tokA"})
	require.NoError(t, err)
	assert.Empty(t, lost)
	for _, v := range g.values(set) {
		require.Empty(t, v)
	}
	lost, err = releaseOn(g.eng, g.ctx, set, nil, protocol.Who{Holder: "tokA"})
	require.NoError(t, err)
	assert.Len(t, lost, 300, "released keys are no longer held")
}

func TestTryLockPartialFailureRollsBack(t *testing.T) {
	t.Parallel()
	g := newRig(t, nil)
	keys := keysN("k", 400)
	set := g.set(keys...)
	// Others hold a few keys spread over every node.
	held := []int{3, 150, 399}
	for _, i := range held {
		require.NoError(t, g.client.Do(g.ctx, g.client.B().Set().Key(set.Lock[i]).Value(fmt.Sprintf("other%d", i)).PxMilliseconds(20_000).Build()).Error())
	}
	_, err := protocol.TryLock(g.ctx, g.eng, set, g.req("tokB", 10*time.Second))
	require.ErrorIs(t, err, protocol.ErrNotAcquired)
	var ce *protocol.ConflictError
	require.ErrorAs(t, err, &ce)
	require.Len(t, ce.Conflicts, 3)
	for k, c := range ce.Conflicts {
		assert.Equal(t, set.Keys[held[k]].Name, c.Key)
		assert.Greater(t, c.TTL, 10*time.Second)
	}
	for i, v := range g.values(set) {
		switch i {
		case 3, 150, 399:
			require.Equal(t, fmt.Sprintf("other%d", i), v)
		default:
			require.Empty(t, v, "key %d left behind", i)
		}
	}
}

// TestReleaseLeavesOtherOwners: a release deletes its own keys, marked
// by a Lua waiter or not, and leaves a key taken over by someone else.
func TestReleaseLeavesOtherOwners(t *testing.T) {
	t.Parallel()
	g := newRig(t, nil)
	set := g.set("a", "b", "c", "d")
	_, err := protocol.TryLock(g.ctx, g.eng, set, g.req("tokC", 10*time.Second))
	require.NoError(t, err)
	// b: taken over by someone else after (pretend) expiry; c: marked by
	// a Lua waiter; d: deleted by an operator.
	require.NoError(t, g.client.Do(g.ctx, g.client.B().Set().Key(set.Lock[1]).Value("intruder").Build()).Error())
	require.NoError(t, g.client.Do(g.ctx, g.client.B().Set().Key(set.Lock[2]).Value("tokC!").Keepttl().Build()).Error())
	require.NoError(t, g.client.Do(g.ctx, g.client.B().Del().Key(set.Lock[3]).Build()).Error())

	lost, err := releaseOn(g.eng, g.ctx, set, nil, protocol.Who{Holder: "tokC"})
	require.NoError(t, err)
	assert.Equal(t, []int{1, 3}, lost)
	assert.Equal(t, []string{"", "intruder", "", ""}, g.values(set))
}

func TestExtendOnlyOurs(t *testing.T) {
	t.Parallel()
	g := newRig(t, nil)
	a := g.set(keysN("a", 50)...)
	b := g.set(keysN("b", 50)...)
	_, err := protocol.TryLock(g.ctx, g.eng, a, g.req("tokA", 2*time.Second))
	require.NoError(t, err)
	_, err = protocol.TryLock(g.ctx, g.eng, b, g.req("tokB", 2*time.Second))
	require.NoError(t, err)
	require.NoError(t, g.client.Do(g.ctx, g.client.B().Set().Key(b.Lock[7]).Value("intruder").PxMilliseconds(500).Build()).Error())
	require.NoError(t, g.client.Do(g.ctx, g.client.B().Set().Key(a.Lock[9]).Value("tokA!").Keepttl().Build()).Error())

	res := g.eng.ExtendMany(g.ctx, []protocol.ExtendJob{
		{Set: a, Who: protocol.Who{Holder: "tokA"}, TTL: time.Minute},
		{Set: b, Who: protocol.Who{Holder: "tokB"}, TTL: time.Minute},
	})
	require.NoError(t, res[0].Err)
	require.NoError(t, res[1].Err)
	assert.Empty(t, res[0].Lost)
	assert.Equal(t, []int{7}, res[1].Lost)
	for i, k := range a.Lock {
		assert.Greater(t, g.pttl(k), int64(50_000), "key %d", i)
	}
	assert.LessOrEqual(t, g.pttl(b.Lock[7]), int64(500), "the intruder's key keeps its own expiry")
	assert.Equal(t, "tokA!", g.values(a)[9], "the waiter's mark survives")

	lost, err := extendOn(g.eng, g.ctx, b, protocol.Who{Holder: "tokB"}, time.Minute)
	require.NoError(t, err)
	assert.Equal(t, []int{7}, lost)
	_, err = releaseOn(g.eng, g.ctx, a, nil, protocol.Who{Holder: "tokA"})
	require.NoError(t, err)
	_, err = releaseOn(g.eng, g.ctx, b, nil, protocol.Who{Holder: "tokB"})
	require.NoError(t, err)
}

// noNodes hides the per-node clients, as when the cluster announces its
// nodes under names the slot map does not use: transactions then go
// through the cluster client's slot-pinned dedicated connections.
type noNodes struct{ rueidis.Client }

func (noNodes) Nodes() map[string]rueidis.Client { return nil }

func TestTransactionsWithoutNodeClients(t *testing.T) {
	t.Parallel()
	g := newRig(t, func(c rueidis.Client) rueidis.Client { return noNodes{c} })
	set := g.set(keysN("k", 100)...)
	_, err := protocol.TryLock(g.ctx, g.eng, set, g.req("tokD", 10*time.Second))
	require.NoError(t, err)
	require.NoError(t, g.client.Do(g.ctx, g.client.B().Set().Key(set.Lock[5]).Value("intruder").Build()).Error())
	lost, err := extendOn(g.eng, g.ctx, set, protocol.Who{Holder: "tokD"}, time.Minute)
	require.NoError(t, err)
	assert.Equal(t, []int{5}, lost)
	lost, err = releaseOn(g.eng, g.ctx, set, nil, protocol.Who{Holder: "tokD"})
	require.NoError(t, err)
	assert.Equal(t, []int{5}, lost)
	for i, v := range g.values(set) {
		if i != 5 {
			require.Empty(t, v)
		}
	}
}

func TestLockWaitsForTheHolder(t *testing.T) {
	t.Parallel()
	g := newRig(t, nil)
	set := g.set(keysN("w", 60)...)
	_, err := protocol.TryLock(g.ctx, g.eng, g.set(set.Keys[30].Name), g.req("holder", 300*time.Millisecond))
	require.NoError(t, err)
	start := time.Now()
	grant, err := protocol.Lock(g.ctx, g.eng, set, g.req("waiter", 10*time.Second))
	require.NoError(t, err)
	took := time.Since(start)
	t.Logf("granted %v after the start (the holder's TTL 300 ms)", took)
	assert.GreaterOrEqual(t, took, 200*time.Millisecond, "it waited for the holder's expiry")
	// The expiry plus at most one backoff (capped at 1 s): 10 s is a
	// margin for load, far below the context's 60 s.
	assert.Less(t, took, 10*time.Second)
	assert.WithinDuration(t, time.Now().Add(10*time.Second), grant.Deadline, time.Second)
	for i, k := range set.Lock {
		require.Greater(t, g.pttl(k), int64(8_000), "key %d has the final attempt's expiry", i)
	}
	_, err = releaseOn(g.eng, g.ctx, set, nil, protocol.Who{Holder: "waiter"})
	require.NoError(t, err)
}

func TestLockCancelledLeavesNothing(t *testing.T) {
	t.Parallel()
	g := newRig(t, nil)
	set := g.set(keysN("c", 200)...)
	require.NoError(t, g.client.Do(g.ctx, g.client.B().Set().Key(set.Lock[100]).Value("holder").PxMilliseconds(20_000).Build()).Error())
	ctx, cancel := context.WithTimeout(g.ctx, 300*time.Millisecond)
	defer cancel()
	_, err := protocol.Lock(ctx, g.eng, set, g.req("waiter", 10*time.Second))
	require.ErrorIs(t, err, context.DeadlineExceeded)
	for i, v := range g.values(set) {
		if i == 100 {
			require.Equal(t, "holder", v)
		} else {
			require.Empty(t, v, "key %d", i)
		}
	}
}

// TestConditionalForms runs release and extend through the conditional
// commands where the server has them (Redis 8.4+, Valkey; run with
// SLOTLOCK_REDIS_IMAGE) and through transactions everywhere.
func TestConditionalForms(t *testing.T) {
	t.Parallel()
	for _, forced := range []bool{false, true} {
		g := newRig(t, nil)
		g.eng.cond.forced = forced
		form := g.eng.cond.use(g.ctx, g.client, opRelease)
		t.Logf("forced transactions %v: conditional form %d", forced, form)
		set := g.set(keysN(fmt.Sprint("f", forced), 40)...)
		_, err := protocol.TryLock(g.ctx, g.eng, set, g.req("tokE", 2*time.Second))
		require.NoError(t, err)
		require.NoError(t, g.client.Do(g.ctx, g.client.B().Set().Key(set.Lock[1]).Value("intruder").Build()).Error())
		require.NoError(t, g.client.Do(g.ctx, g.client.B().Set().Key(set.Lock[2]).Value("tokE!").Keepttl().Build()).Error())
		lost, err := extendOn(g.eng, g.ctx, set, protocol.Who{Holder: "tokE"}, time.Minute)
		require.NoError(t, err)
		assert.Equal(t, []int{1}, lost)
		assert.Greater(t, g.pttl(set.Lock[2]), int64(50_000))
		lost, err = releaseOn(g.eng, g.ctx, set, nil, protocol.Who{Holder: "tokE"})
		require.NoError(t, err)
		assert.Equal(t, []int{1}, lost)
		for i, v := range g.values(set) {
			if i != 1 {
				require.Empty(t, v)
			}
		}
		assert.False(t, g.eng.cond.noDel.Load() || g.eng.cond.noSet.Load(), "a probed form was refused at run time")
	}
}
