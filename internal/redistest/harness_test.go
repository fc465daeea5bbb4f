package redistest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/moby/moby/client"
	"github.com/redis/rueidis"
	"github.com/testcontainers/testcontainers-go"
)

// shared is the package's cluster, on the backend SLOTLOCK_CLUSTER picks.
// The tests below use it one after another and leave it ready.
var shared *Cluster

func TestMain(m *testing.M) { os.Exit(Main(m, Options{}, &shared)) }

// testCtx bounds one test: a stuck cluster must fail the test, not hang the
// run until go test's global timeout.
func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func clusterClient(t *testing.T, c *Cluster) rueidis.Client {
	t.Helper()
	cl, err := c.Client()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// readyAfter fails the test unless the cluster is ready, so that one test's
// fault never leaks into the next.
func readyAfter(t *testing.T, c *Cluster) {
	t.Cleanup(func() {
		if err := c.WaitReady(context.Background()); err != nil {
			t.Errorf("cluster left not ready: %v", err)
		}
	})
}

func TestTopology(t *testing.T) {
	c := Require(t, shared)
	ctx := testCtx(t)

	masters, err := c.Masters(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(masters) != 3 {
		t.Fatalf("%d masters, want 3", len(masters))
	}
	for _, m := range masters {
		first := firstSlot(shardOf(t, c, m))
		if n, err := c.NodeForSlot(ctx, uint16(first)); err != nil || n != m {
			t.Errorf("NodeForSlot(%d) = %v, %v; want %s", first, n, err, m)
		}
	}
	shards, err := c.view(ctx)
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, s := range shards {
		total += s.slotCount()
	}
	if total != numSlots {
		t.Fatalf("%d slots assigned, want %d", total, numSlots)
	}

	replicas, err := c.Replicas(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(replicas) != 3 {
		t.Fatalf("%d replicas, want 3", len(replicas))
	}
	for _, r := range replicas {
		repl, err := r.Info(ctx, "replication")
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(repl, "# Replication") || infoField(repl, "master_link_status") != "master_link_status:up" {
			t.Errorf("replica %s: %s", r, infoField(repl, "master_link_status"))
		}
	}
	if got := len(c.Addrs()); got != 6 {
		t.Errorf("%d addresses, want 6", got)
	}

	cl := clusterClient(t, c)
	for _, key := range []string{"123456789", "a", "slotlock:lock:42", "{user1000}.following"} {
		got, err := cl.Do(ctx, cl.B().ClusterKeyslot().Key(key).Build()).AsInt64()
		if err != nil {
			t.Fatal(err)
		}
		want := keySlot(key)
		if key == "{user1000}.following" {
			want = keySlot("user1000")
		}
		if int(got) != want {
			t.Errorf("CLUSTER KEYSLOT %q = %d, harness says %d", key, got, want)
		}
		if err := cl.Do(ctx, cl.B().Set().Key(key).Value("v").Build()).Error(); err != nil {
			t.Fatalf("SET %q: %v", key, err)
		}
		owner, err := c.NodeForSlot(ctx, uint16(want))
		if err != nil {
			t.Fatal(err)
		}
		if v, err := owner.Do(ctx, "GET", key).ToString(); err != nil || v != "v" {
			t.Errorf("GET %q on owner %s = %q, %v", key, owner, v, err)
		}
	}
	if err := c.FlushAll(ctx); err != nil {
		t.Fatal(err)
	}
	n, err := cl.Do(ctx, cl.B().Exists().Key("a").Build()).AsInt64()
	if err != nil || n != 0 {
		t.Errorf("after FlushAll EXISTS a = %d, %v", n, err)
	}
}

func TestKillRestartReplica(t *testing.T) {
	c := Require(t, shared)
	ctx := testCtx(t)
	readyAfter(t, c)

	masters, err := c.Masters(ctx)
	if err != nil {
		t.Fatal(err)
	}
	reps, err := c.ReplicasOf(ctx, masters[0])
	if err != nil || len(reps) == 0 {
		t.Fatalf("replicas of %s: %v %v", masters[0], reps, err)
	}
	r := reps[0]
	if err := r.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := pingAddr(ctx, r.Addr(), nil); err == nil {
		t.Fatalf("killed node %s still answers PING", r)
	}
	// The shard keeps its master: the cluster stays ready without r.
	if err := c.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	cl := clusterClient(t, c)
	key := keyInShard("redistest:kill:", shardOf(t, c, masters[0]))
	if err := cl.Do(ctx, cl.B().Set().Key(key).Value("after-kill").Build()).Error(); err != nil {
		t.Fatal(err)
	}

	if err := r.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	if role, err := r.Role(ctx); err != nil || role != "replica" {
		t.Fatalf("restarted %s has role %q, %v", r, role, err)
	}
	// The restarted replica lost its memory and must have resynced.
	if err := retry(ctx, func() error {
		res := r.doMulti(ctx, []string{"READONLY"}, []string{"GET", key})
		v, err := res[1].ToString()
		if err != nil || v != "after-kill" {
			return fmt.Errorf("GET %s on %s = %q, %v", key, r, v, err)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

func shardOf(t *testing.T, c *Cluster, master *Node) shard {
	t.Helper()
	shards, err := c.view(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range shards {
		if m, ok := s.master(); ok && m.id == master.id && s.slotCount() > 0 {
			return s
		}
	}
	t.Fatalf("no shard for %s", master)
	return shard{}
}

func TestPauseResume(t *testing.T) {
	c := Require(t, shared)
	ctx := testCtx(t)
	readyAfter(t, c)

	replicas, err := c.Replicas(ctx)
	if err != nil {
		t.Fatal(err)
	}
	r := replicas[len(replicas)-1]
	if err := r.Pause(); err != nil {
		t.Fatal(err)
	}
	pctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	err = pingAddr(pctx, r.Addr(), nil)
	cancel()
	if err == nil {
		t.Fatalf("paused node %s answers PING", r)
	}
	if pr, ok := r.run.(*processRunner); ok {
		if err := waitStopped(ctx, pr.pid(), true); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.Resume(); err != nil {
		t.Fatal(err)
	}
	if err := pingAddr(ctx, r.Addr(), nil); err != nil {
		t.Fatalf("resumed node %s: %v", r, err)
	}
}

func TestFailover(t *testing.T) {
	c := Require(t, shared)
	ctx := testCtx(t)
	readyAfter(t, c)

	masters, err := c.Masters(ctx)
	if err != nil {
		t.Fatal(err)
	}
	oldMaster := masters[1]
	reps, err := c.ReplicasOf(ctx, oldMaster)
	if err != nil || len(reps) == 0 {
		t.Fatalf("replicas of %s: %v %v", oldMaster, reps, err)
	}
	promoted := reps[0]

	for _, step := range []struct {
		mode     string
		from, to *Node
	}{
		{"", oldMaster, promoted},
		{"TAKEOVER", promoted, oldMaster}, // and back, for the tests after this one
	} {
		if err := c.Failover(ctx, step.to, step.mode); err != nil {
			t.Fatalf("failover %q to %s: %v", step.mode, step.to, err)
		}
		if role, err := step.to.Role(ctx); err != nil || role != "master" {
			t.Fatalf("after failover %q, %s is %q (%v)", step.mode, step.to, role, err)
		}
		if role, err := step.from.Role(ctx); err != nil || role != "replica" {
			t.Fatalf("after failover %q, %s is %q (%v)", step.mode, step.from, role, err)
		}
		ms, err := c.Masters(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(ms, step.to) || slices.Contains(ms, step.from) {
			t.Fatalf("after failover %q, masters are %v", step.mode, ms)
		}
	}
	if err := c.Failover(ctx, masters[0], ""); err == nil {
		t.Error("Failover on a master succeeded")
	}
}

func TestKillMasterFailsOver(t *testing.T) {
	c := Require(t, shared)
	ctx := testCtx(t)
	readyAfter(t, c)

	masters, err := c.Masters(ctx)
	if err != nil {
		t.Fatal(err)
	}
	m := masters[2]
	reps, err := c.ReplicasOf(ctx, m)
	if err != nil || len(reps) == 0 {
		t.Fatalf("replicas of %s: %v %v", m, reps, err)
	}
	if err := m.Kill(); err != nil {
		t.Fatal(err)
	}
	// Ready means a replica took over the dead master's slots: after
	// cluster-node-timeout (5 s) and an election.
	if err := c.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	if role, err := reps[0].Role(ctx); err != nil || role != "master" {
		t.Fatalf("replica %s of killed master is %q (%v)", reps[0], role, err)
	}
	if err := m.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	if role, err := m.Role(ctx); err != nil || role != "replica" {
		t.Fatalf("restarted old master %s is %q (%v)", m, role, err)
	}
}

func TestMoveSlot(t *testing.T) {
	c := Require(t, shared)
	ctx := testCtx(t)
	readyAfter(t, c)
	cl := clusterClient(t, c)

	const slot = 4242
	from, err := c.NodeForSlot(ctx, slot)
	if err != nil {
		t.Fatal(err)
	}
	masters, err := c.Masters(ctx)
	if err != nil {
		t.Fatal(err)
	}
	to := masters[0]
	if to == from {
		to = masters[1]
	}

	const preload = 250 // more than one MIGRATE batch
	for i := range preload {
		key := keyInSlot(slot, "pre"+strconv.Itoa(i))
		if err := cl.Do(ctx, cl.B().Set().Key(key).Value(strconv.Itoa(i)).Build()).Error(); err != nil {
			t.Fatal(err)
		}
	}

	// A writer keeps adding keys to the slot during the move; rueidis
	// follows the ASK redirections. Every write it saw succeed must be
	// readable afterwards.
	var (
		stop    atomic.Bool
		wg      sync.WaitGroup
		written []string
		werr    error
	)
	wg.Go(func() {
		for i := 0; !stop.Load(); i++ {
			key := keyInSlot(slot, "live"+strconv.Itoa(i))
			err := cl.Do(ctx, cl.B().Set().Key(key).Value("live").Build()).Error()
			if err != nil {
				werr = fmt.Errorf("SET %s during move: %w", key, err)
				return
			}
			written = append(written, key)
		}
	})
	err = c.MoveSlot(ctx, slot, to)
	stop.Store(true)
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if werr != nil {
		t.Fatal(werr)
	}
	if owner, err := c.NodeForSlot(ctx, slot); err != nil || owner != to {
		t.Fatalf("slot %d owned by %v (%v), want %s", slot, owner, err, to)
	}
	for i := range preload {
		key := keyInSlot(slot, "pre"+strconv.Itoa(i))
		v, err := cl.Do(ctx, cl.B().Get().Key(key).Build()).ToString()
		if err != nil || v != strconv.Itoa(i) {
			t.Fatalf("GET %s after move = %q, %v", key, v, err)
		}
	}
	for _, key := range written {
		if v, err := cl.Do(ctx, cl.B().Get().Key(key).Build()).ToString(); err != nil || v != "live" {
			t.Fatalf("GET %s after move = %q, %v", key, v, err)
		}
	}
	n, err := to.Do(ctx, "CLUSTER", "COUNTKEYSINSLOT", strconv.Itoa(slot)).AsInt64()
	if err != nil || int(n) != preload+len(written) {
		t.Fatalf("new owner %s has %d keys in slot %d (%v), want %d", to, n, slot, err, preload+len(written))
	}
	n, err = from.Do(ctx, "CLUSTER", "COUNTKEYSINSLOT", strconv.Itoa(slot)).AsInt64()
	if err != nil || n != 0 {
		t.Fatalf("old owner %s still has %d keys in slot %d (%v)", from, n, slot, err)
	}
	t.Logf("moved slot %d with %d keys (%d written during the move)", slot, preload+len(written), len(written))
	if err := c.FlushAll(ctx); err != nil {
		t.Fatal(err)
	}
}

// backendOrSkip skips a backend-specific test when the backend is missing,
// except under CI=true, where both must be there (.ci/run installs the
// Redis binaries and runs on a Docker engine): then its absence is a
// failure, whichever backend the run asked for.
func backendOrSkip(t *testing.T, b Backend) {
	t.Helper()
	var err error
	switch b {
	case BackendDocker:
		err = dockerAvailable(context.Background())
	case BackendProcess:
		_, err = redisServerPath()
	}
	if err == nil {
		return
	}
	if underCI() {
		t.Fatalf("CI=true but the %s backend is unavailable: %v", b, err)
	}
	t.Skipf("%s backend unavailable: %v", b, err)
}

// TestBackends runs each backend's node operations on a private cluster and
// checks that Close leaves no process, container or directory behind.
func TestBackends(t *testing.T) {
	for _, b := range []Backend{BackendProcess, BackendDocker} {
		t.Run(string(b), func(t *testing.T) {
			backendOrSkip(t, b)
			ctx := testCtx(t)
			start := time.Now()
			c, err := Start(ctx, Options{Backend: b})
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s cluster ready in %s", b, time.Since(start).Round(time.Millisecond))
			defer c.Close()
			if c.Backend() != b {
				t.Fatalf("Backend() = %s, want %s", c.Backend(), b)
			}
			replicas, err := c.Replicas(ctx)
			if err != nil {
				t.Fatal(err)
			}
			r := replicas[0]
			if err := r.Kill(); err != nil {
				t.Fatal(err)
			}
			if err := r.Kill(); err != nil { // idempotent
				t.Fatal(err)
			}
			if err := r.Restart(ctx); err != nil {
				t.Fatal(err)
			}
			if err := r.Pause(); err != nil {
				t.Fatal(err)
			}
			pctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
			perr := pingAddr(pctx, r.Addr(), nil)
			cancel()
			if perr == nil {
				t.Fatalf("paused %s answers PING", r)
			}
			if err := r.Resume(); err != nil {
				t.Fatal(err)
			}
			if err := c.WaitReady(ctx); err != nil {
				t.Fatal(err)
			}
			// A paused node can be killed (a frozen VM that is then shut
			// down), and comes back like any killed node.
			p := replicas[1]
			if err := p.Pause(); err != nil {
				t.Fatal(err)
			}
			if err := p.Kill(); err != nil {
				t.Fatal(err)
			}
			if err := p.Restart(ctx); err != nil {
				t.Fatal(err)
			}
			if err := c.WaitReady(ctx); err != nil {
				t.Fatal(err)
			}
			// Close must work with a node paused: tests that fail half way
			// leave them so.
			if err := p.Pause(); err != nil {
				t.Fatal(err)
			}
			checkClose(t, c)
		})
	}
}

func TestStandalone(t *testing.T) {
	for _, b := range []Backend{BackendProcess, BackendDocker} {
		t.Run(string(b), func(t *testing.T) {
			backendOrSkip(t, b)
			ctx := testCtx(t)
			c := StartStandaloneForTest(t, Options{Backend: b})
			if len(c.Nodes()) != 1 {
				t.Fatalf("%d nodes, want 1", len(c.Nodes()))
			}
			cl := clusterClient(t, c)
			if err := cl.Do(ctx, cl.B().Set().Key("k").Value("v").Build()).Error(); err != nil {
				t.Fatal(err)
			}
			if v, err := cl.Do(ctx, cl.B().Get().Key("k").Build()).ToString(); err != nil || v != "v" {
				t.Fatalf("GET k = %q, %v", v, err)
			}
			if err := c.nodes[0].Do(ctx, "CLUSTER", "INFO").Error(); err == nil {
				t.Error("standalone server has cluster support enabled")
			}
			ms, err := c.Masters(ctx)
			if err != nil || len(ms) != 1 {
				t.Fatalf("Masters = %v, %v", ms, err)
			}
			if err := c.FlushAll(ctx); err != nil {
				t.Fatal(err)
			}
			checkClose(t, c)
		})
	}
}

// checkClose closes c twice and looks for anything left behind.
func checkClose(t *testing.T, c *Cluster) {
	t.Helper()
	var pids []int
	for _, n := range c.nodes {
		if pr, ok := n.run.(*processRunner); ok {
			pids = append(pids, pr.pid())
		}
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	for _, pid := range pids {
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("node pid %d still exists after Close (kill 0: %v)", pid, err)
		}
	}
	switch l := c.launcher.(type) {
	case *processLauncher:
		if _, err := os.Stat(l.root); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("node directory %s still exists after Close (%v)", l.root, err)
		}
	case *dockerLauncher:
		ids, err := clusterContainers(l.cluster)
		if err != nil {
			t.Fatal(err)
		}
		if len(ids) != 0 {
			t.Errorf("containers left after Close: %v", ids)
		}
	}
	for _, n := range c.nodes {
		if err := pingAddr(context.Background(), n.Addr(), nil); err == nil {
			t.Errorf("node %s answers after Close", n.Addr())
		}
	}
}

// clusterContainers lists, through the Docker API, the containers labelled
// with one cluster's id, running or not.
func clusterContainers(cluster string) ([]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cli, err := testcontainers.NewDockerClientWithOpts(ctx)
	if err != nil {
		return nil, err
	}
	defer cli.Close()
	list, err := cli.ContainerList(ctx, client.ContainerListOptions{
		All:     true,
		Filters: make(client.Filters).Add("label", labelCluster+"="+cluster),
	})
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, c := range list.Items {
		ids = append(ids, c.ID[:12])
	}
	return ids, nil
}

func TestOptions(t *testing.T) {
	o := Options{}.withDefaults()
	if o.Masters != 3 || o.Replicas != 1 {
		t.Errorf("zero Options = %+v, want 3 masters with 1 replica", o)
	}
	if o := (Options{Replicas: NoReplicas}).withDefaults(); o.Replicas != 0 {
		t.Errorf("NoReplicas gives %d replicas", o.Replicas)
	}
	t.Setenv(EnvBackend, "bogus")
	if _, err := (Options{}).resolveBackend(context.Background()); err == nil {
		t.Error("unknown backend accepted")
	}
	t.Setenv(EnvBackend, "process")
	if ch, err := (Options{}).resolveBackend(context.Background()); ch.backend != BackendProcess || ch.auto || err != nil {
		t.Errorf("env process: %+v %v", ch, err)
	}
	if ch, err := (Options{Backend: BackendDocker}).resolveBackend(context.Background()); ch.backend != BackendDocker || err != nil {
		t.Errorf("Options.Backend does not win over the environment: %+v %v", ch, err)
	}
}

func TestKeySlot(t *testing.T) {
	// CRC16-XMODEM("123456789") is 0x31C3, the check value of the spec.
	if got := keySlot("123456789"); got != 0x31C3%numSlots {
		t.Errorf("keySlot(123456789) = %d", got)
	}
	for _, s := range []int{0, 1, 4242, numSlots - 1} {
		k := keyInSlot(s, "x")
		if got := keySlot(k[1 : len(k)-2]); got != s {
			t.Errorf("keyInSlot(%d) = %q in slot %d", s, k, got)
		}
	}
}
