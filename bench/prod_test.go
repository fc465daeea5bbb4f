package bench

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/slotlock/slotlock/bench/latency"
)

// TestContendersBehindRTT: every contender's client goes through the
// delaying dialer (a batch takes at least a round trip), and still proves
// it held its keys.
func TestContendersBehindRTT(t *testing.T) {
	env := newEnv(t)
	ctx := context.Background()
	const rtt = time.Millisecond
	for _, f := range Contenders {
		cell := Cell{Contender: f.Name, K: 10, W: 2, RTT: rtt}
		t.Run(cell.Name(), func(t *testing.T) {
			w0 := env.Wire.Writes.Load()
			run, err := env.NewRun(ctx, cell)
			if err != nil {
				t.Fatal(err)
			}
			defer run.Close()
			if err := run.Verify(ctx, 3); err != nil {
				t.Fatal(err)
			}
			if env.Wire.Writes.Load() == w0 {
				t.Fatal("no chunk went through the delaying layer")
			}
			res := run.round(ctx, 4, false)
			if res.Err != nil {
				t.Fatal(res.Err)
			}
			// Lock and release: at least two round trips, less the
			// clock's lead in each of four directions.
			if min := 2*rtt - 4*latency.Lead(); res.Latency.P50 < min {
				t.Fatalf("batch p50 %v behind a %v round trip, want at least %v", res.Latency.P50, rtt, min)
			}
		})
	}
}

// TestMeasureWire: what the report prints can only be at least the
// asked-for round trip (less the clock's lead each way).
func TestMeasureWire(t *testing.T) {
	env := newEnv(t)
	const rtt = time.Millisecond
	w, err := env.MeasureWire(context.Background(), rtt, 50)
	if err != nil {
		t.Fatal(err)
	}
	floor := rtt - 2*latency.Lead()
	if w.Ping.P50 < floor || w.Pipeline.P50 < floor {
		t.Fatalf("PING p50 %v, pipeline p50 %v, want at least %v", w.Ping.P50, w.Pipeline.P50, floor)
	}
	t.Logf("asked %v: PING p50 %v p99 %v, %d-command pipeline p50 %v", rtt, w.Ping.P50, w.Ping.P99, WirePipeline, w.Pipeline.P50)
}

func TestObserver(t *testing.T) {
	env := newEnv(t)
	o, err := env.startObserver(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	o.start()
	time.Sleep(100 * time.Millisecond)
	d, n, errs := o.stop()
	if n == 0 || errs > 0 || d.Max <= 0 {
		t.Fatalf("observer: %d GETs, %d failed, %+v", n, errs, d)
	}
}

// TestCheckHolds: the cross-process check sees an overlap on one key, and
// only that.
func TestCheckHolds(t *testing.T) {
	for _, tc := range []struct {
		name  string
		holds []Hold
		want  int
	}{
		{"apart", []Hold{{W: 0, From: 10, To: 20, Keys: []int32{1, 2}}, {W: 1, From: 21, To: 30, Keys: []int32{2, 3}}}, 0},
		{"touching", []Hold{{W: 0, From: 10, To: 20, Keys: []int32{1, 2}}, {W: 1, From: 20, To: 30, Keys: []int32{2}}}, 0},
		{"other keys", []Hold{{W: 0, From: 10, To: 20, Keys: []int32{1}}, {W: 1, From: 15, To: 30, Keys: []int32{2}}}, 0},
		{"overlap", []Hold{{W: 1, From: 15, To: 30, Keys: []int32{5, 2}}, {W: 0, From: 10, To: 20, Keys: []int32{1, 2}}}, 1},
		{"inside", []Hold{{W: 0, From: 10, To: 40, Keys: []int32{7}}, {W: 3, From: 20, To: 30, Keys: []int32{7}}}, 1},
	} {
		if got := CheckHolds(tc.holds, 10); got != tc.want {
			t.Errorf("%s: %d violations, want %d", tc.name, got, tc.want)
		}
	}
}

// TestProcs runs the contended cell over worker processes (this test
// binary, re-executed): every process verifies its keys, the parent finds
// no overlap across them, and the batches of all processes are counted.
// With MaxProcs, each process runs with the GOMAXPROCS asked for (one that
// differs from Go's default here), which RunProcs checks in the processes'
// reports. The machine's busy cores are measured over the timed window.
func TestProcs(t *testing.T) {
	env := newEnv(t)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	notDefault := 1
	if runtime.NumCPU() == 1 {
		notDefault = 2
	}
	for _, split := range [][2]int{{1, 0}, {2, 0}, {2, notDefault}} {
		cell := Cell{Contender: "slotlock", K: 5, W: 4, Hot: 30, RTT: 200 * time.Microsecond, Procs: split[0], MaxProcs: split[1]}
		t.Run(cell.Name(), func(t *testing.T) {
			res := env.RunProcs(context.Background(), cell, 300*time.Millisecond, 2, func() *exec.Cmd { return exec.Command(exe) })
			if res.Err != nil {
				t.Fatal(res.Err)
			}
			if res.Batches < cell.W || res.Violations != 0 || res.Latency.P50 <= 0 {
				t.Fatalf("%d batches, %d violations, latency %+v", res.Batches, res.Violations, res.Latency)
			}
			// The machine's busy cores during the timed window, which the
			// targets read (where /proc/stat is). Fails if RunProcs does
			// not measure them.
			if MachineCPU() > 0 && res.MachineBusy <= 0 {
				t.Fatalf("machine's busy cores not measured: %v", res.MachineBusy)
			}
		})
	}
}

// TestAttach runs contenders against "a cluster the user already has"
// (the harness's, on loopback): Attach refuses a prefix that holds keys,
// every key the contenders write is under the prefix, and Cleanup leaves
// none behind.
func TestAttach(t *testing.T) {
	base := newEnv(t)
	ctx := context.Background()
	if err := base.reset(ctx); err != nil {
		t.Fatal(err)
	}
	const prefix = "slotbench-test:"
	if err := base.probe.Do(ctx, base.probe.B().Set().Key(prefix+"someone's").Value("data").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	if _, err := Attach(ctx, base.Seeds(), prefix); !errors.Is(err, ErrPrefixInUse) {
		t.Fatalf("Attach over an existing key = %v, want ErrPrefixInUse", err)
	}
	if err := base.reset(ctx); err != nil {
		t.Fatal(err)
	}
	env, err := Attach(ctx, base.Seeds(), prefix)
	if err != nil {
		t.Fatal(err)
	}
	defer env.Close()
	if _, err := Attach(ctx, base.Seeds(), "bad{prefix}"); err == nil {
		t.Fatal("Attach accepted a prefix with braces")
	}
	// Every key the contenders write, as the masters report it: under the
	// prefix, and some at all (a SCAN after the runs, which release their
	// keys, could find nothing and pass).
	written := watchWrites(t, env.masters)
	for _, f := range Contenders {
		cell := Cell{Contender: f.Name, K: 10, W: 2}
		run, err := env.NewRun(ctx, cell)
		if err != nil {
			t.Fatal(err)
		}
		if err := run.Verify(ctx, 2); err != nil {
			t.Fatal(err)
		}
		run.Close()
		// Notifications are pushed after the commands' replies: wait for
		// the first (anything later counts for the next contender, and is
		// checked all the same).
		var keys []string
		for deadline := time.Now().Add(5 * time.Second); len(keys) == 0 && time.Now().Before(deadline); {
			time.Sleep(10 * time.Millisecond)
			keys = written()
		}
		if len(keys) == 0 {
			t.Fatalf("%s: no write seen on any master", f.Name)
		}
		for _, k := range keys {
			if !strings.HasPrefix(k, prefix) {
				t.Errorf("%s wrote %q, outside the prefix %q", f.Name, k, prefix)
			}
		}
	}
	if _, err := env.Cleanup(ctx); err != nil {
		t.Fatal(err)
	}
	for _, m := range env.masters {
		if k, err := firstKey(ctx, m, prefix); err != nil || k != "" {
			t.Fatalf("after Cleanup %s still holds %q (%v)", m.addr, k, err)
		}
	}
}

// watchWrites turns on keyspace notifications on every master and
// subscribes to them; the function it returns gives the keys written (or
// expired, or deleted) since its last call. The masters' settings are put
// back at the end of the test.
func watchWrites(t *testing.T, masters []node) func() []string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var mu sync.Mutex
	var keys []string
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	for _, m := range masters {
		old, err := m.client.Do(ctx, m.client.B().ConfigGet().Parameter("notify-keyspace-events").Build()).AsStrMap()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = m.client.Do(context.Background(), m.client.B().ConfigSet().ParameterValue().ParameterValue("notify-keyspace-events", old["notify-keyspace-events"]).Build()).Error()
		})
		if err := m.client.Do(ctx, m.client.B().ConfigSet().ParameterValue().ParameterValue("notify-keyspace-events", "KA").Build()).Error(); err != nil {
			t.Fatal(err)
		}
		before, err := m.client.Do(ctx, m.client.B().PubsubNumpat().Build()).AsInt64()
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = m.client.Receive(ctx, m.client.B().Psubscribe().Pattern("__keyspace@0__:*").Build(), func(msg rueidis.PubSubMessage) {
				mu.Lock()
				keys = append(keys, strings.TrimPrefix(msg.Channel, "__keyspace@0__:"))
				mu.Unlock()
			})
		}()
		deadline := time.Now().Add(10 * time.Second)
		for {
			n, err := m.client.Do(ctx, m.client.B().PubsubNumpat().Build()).AsInt64()
			if err != nil {
				t.Fatal(err)
			}
			if n > before {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("PSUBSCRIBE on %s not in place after 10 s", m.addr)
			}
			time.Sleep(time.Millisecond)
		}
	}
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		out := keys
		keys = nil
		return out
	}
}
