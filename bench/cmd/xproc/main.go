// Command xproc measures what a slotlock batch costs when its workers run
// in separate OS processes (each one client and one Locker) or in one
// process with a Locker per worker, against a cluster you already have:
// batches/s, client CPU per batch (getrusage of every worker process),
// wait p99 and longest wait, and what an Observer counts (attempts,
// conflicts). With -hot large the same workers rarely collide, which
// shows what separate processes cost with no waiting at all: the
// ceiling that no protocol for waiters can pass on the same machine
// (docs/design.md, "Waiting by reservation across processes", is the
// protocol it measures). Reset INFO commandstats on the masters before a run
// and divide by the batches it prints to get Redis commands per batch.
//
//	cd bench && go run ./cmd/xproc -addrs 127.0.0.1:7000 -procs 16 -w 16 -hot 200
//
// -kind takes another kind of lease (bench.Kinds: plain, mixed, allexcl,
// permits, reentrant, perslot), each request through Locker.Acquire with
// -wait; a wait that runs out is counted ("ran out"), not fatal. The
// requests are those of slotbench's kind cells (bench.KindRequests):
//
//	go run ./cmd/xproc -addrs 127.0.0.1:7000 -procs 3 -w 18 -hot 40 -kind mixed -d 10s
//
// -cold mixes in batches over a million cold keys, as a service's
// Locker serves hot keys and cold ones alike:
//
//	go run ./cmd/xproc -addrs 127.0.0.1:7000 -procs 4 -w 16 -hot 200 -cold 0.5
//
// Keys go under -prefix (default "xproc") and are deleted by their own
// releases; a run holds nothing when it ends.
package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/rueidis"

	"github.com/slotlock/slotlock"
	"github.com/slotlock/slotlock/bench"
	"github.com/slotlock/slotlock/bench/latency"
)

// envChild marks a worker process (its stdin closing is the start signal).
const envChild = "XPROC_CHILD"

type counter struct{ attempts, conflicts atomic.Int64 }

func (c *counter) Acquired(e slotlock.AcquireEvent) {
	c.attempts.Add(int64(e.Attempts))
	c.conflicts.Add(int64(e.Conflicts))
}
func (c *counter) Released(slotlock.ReleaseEvent) {}
func (c *counter) Renewed(slotlock.RenewEvent)    {}
func (c *counter) Ended(slotlock.EndEvent)        {}

// report is what one process measured.
type report struct {
	Batches             int64
	Attempts, Conflicts int64
	Waits               []time.Duration
	CPU                 time.Duration
	// RanOut counts the requests whose -wait ran out (with -kind).
	RanOut int64
	// Kind is the -kind the process ran, which the parent checks.
	Kind string
}

// coldKeys is the keyspace of -cold's batches: two batches of 10 meet
// about once in 10,000.
const coldKeys = 1_000_000

func main() {
	addrs := flag.String("addrs", "127.0.0.1:7000", "seed addresses of the cluster, comma-separated")
	prefix := flag.String("prefix", "xproc", "slotlock key prefix")
	rtt := flag.Duration("rtt", 200*time.Microsecond, "emulated round trip (bench/latency)")
	procs := flag.Int("procs", 0, "worker processes (each one client and one Locker); 0 runs the workers in this process")
	workers := flag.Int("w", 16, "workers in all")
	lockers := flag.Int("lockers", 0, "Lockers on one client in each process: with -procs 0, 0 means one per worker; with -procs N, 0 means one")
	dur := flag.Duration("d", 3*time.Second, "how long the workers run")
	k := flag.Int("k", 10, "keys per batch")
	hot := flag.Int("hot", 200, "keys to draw from")
	cold := flag.Float64("cold", 0, "without -kind: the fraction of batches that draw their keys from a million cold keys instead")
	kind := flag.String("kind", "", "kind of lease, through Acquire with -wait: "+strings.Join(bench.Kinds, "|")+" (default: Lock, waiting as long as it takes)")
	wait := flag.Duration("wait", bench.KindWait, "with -kind: how long one request waits before it gives up (counted as ran out)")
	flag.Parse()
	if *kind != "" && !bench.IsKind(*kind) {
		log.Fatalf("-kind %q: want one of %s", *kind, strings.Join(bench.Kinds, ", "))
	}
	if *procs > 0 {
		parent(*procs, *workers, *lockers, *dur)
		return
	}
	if *lockers == 0 {
		*lockers = *workers
	}
	d := latency.Dialer{RTT: *rtt}
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: strings.Split(*addrs, ","),
		DialCtxFn: func(ctx context.Context, addr string, nd *net.Dialer, _ *tls.Config) (net.Conn, error) {
			return d.DialWith(ctx, nd, "tcp", addr)
		}})
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	c := &counter{}
	ls := make([]*slotlock.Locker, *lockers)
	for i := range ls {
		o := slotlock.Options{TTL: 10 * time.Second, Observer: c, Prefix: *prefix, PerSlot: *kind == bench.KindPerSlot}
		if ls[i], err = slotlock.New(client, o); err != nil {
			log.Fatal(err)
		}
		defer ls[i].Close()
		// Warm up: the slot map, and a script load per node.
		lease, err := ls[i].Lock(context.Background(), fmt.Sprintf("warm%d", i))
		if err != nil {
			log.Fatal(err)
		}
		_ = lease.Release(context.Background())
	}
	c.attempts.Store(0)
	c.conflicts.Store(0)
	if os.Getenv(envChild) != "" {
		var b [1]byte
		_, _ = os.Stdin.Read(b[:])
	}
	cpu0 := cpuTime()
	stop := time.Now().Add(*dur)
	var batches, ranOut atomic.Int64
	var mu sync.Mutex
	var waits []time.Duration
	var wg sync.WaitGroup
	for w := range *workers {
		wg.Go(func() {
			l := ls[w%len(ls)]
			r := rand.New(rand.NewPCG(uint64(w), uint64(os.Getpid())))
			var mine []time.Duration
			keys := make([]string, 0, *k)
			asks := bench.KindRequests(*kind, *k, *hot, uint64(w)<<32|uint64(os.Getpid()))
			// One batch: a kind's request, or K distinct hot keys.
			acquire := func() (*slotlock.Lease, error) {
				if *kind != "" {
					return l.Acquire(kindContext(*kind, w), kindRequest(asks(), *wait))
				}
				keys = keys[:0]
				name, space := "hot%d", *hot
				if r.Float64() < *cold {
					name, space = "cold%d", coldKeys
				}
				for len(keys) < *k {
					key := fmt.Sprintf(name, r.IntN(space))
					if !slices.Contains(keys, key) {
						keys = append(keys, key)
					}
				}
				return l.Lock(context.Background(), keys...)
			}
			for time.Now().Before(stop) {
				t0 := time.Now()
				lease, err := acquire()
				if *kind != "" && errors.Is(err, slotlock.ErrNotAcquired) {
					ranOut.Add(1)
					continue
				}
				if err != nil {
					log.Fatal(err)
				}
				mine = append(mine, time.Since(t0))
				if err := lease.Release(context.Background()); err != nil {
					log.Fatal(err)
				}
				batches.Add(1)
			}
			mu.Lock()
			waits = append(waits, mine...)
			mu.Unlock()
		})
	}
	wg.Wait()
	rep := report{Batches: batches.Load(), Attempts: c.attempts.Load(), Conflicts: c.conflicts.Load(), Waits: waits, CPU: cpuTime() - cpu0, RanOut: ranOut.Load(), Kind: *kind}
	if os.Getenv(envChild) != "" {
		_ = json.NewEncoder(os.Stdout).Encode(rep)
		return
	}
	summarize([]report{rep}, *dur)
}

// parent runs the workers in procs processes of workers/procs each, with
// lockers Lockers each (at least one), starts them together once every
// one has warmed up, and sums their reports.
func parent(procs, workers, lockers int, dur time.Duration) {
	var args []string
	flag.Visit(func(f *flag.Flag) {
		if f.Name != "procs" && f.Name != "w" && f.Name != "lockers" {
			args = append(args, "-"+f.Name+"="+f.Value.String())
		}
	})
	args = append(args, fmt.Sprintf("-w=%d", workers/procs), fmt.Sprintf("-lockers=%d", max(1, lockers)))
	type proc struct {
		cmd *exec.Cmd
		out strings.Builder
	}
	ps := make([]*proc, procs)
	var starts []interface{ Close() error }
	for i := range ps {
		p := &proc{cmd: exec.Command(os.Args[0], args...)}
		p.cmd.Env = append(os.Environ(), envChild+"=1")
		p.cmd.Stdout, p.cmd.Stderr = &p.out, os.Stderr
		in, err := p.cmd.StdinPipe()
		if err != nil {
			log.Fatal(err)
		}
		if err := p.cmd.Start(); err != nil {
			log.Fatal(err)
		}
		ps[i], starts = p, append(starts, in)
	}
	time.Sleep(1500 * time.Millisecond) // every process warms up (not an ordering: a late one only starts late)
	for _, in := range starts {
		_ = in.Close()
	}
	var reps []report
	for i, p := range ps {
		if err := p.cmd.Wait(); err != nil {
			log.Fatalf("process %d: %v", i, err)
		}
		var r report
		if err := json.Unmarshal([]byte(p.out.String()), &r); err != nil {
			log.Fatalf("process %d: %v", i, err)
		}
		if kind := flag.Lookup("kind").Value.String(); r.Kind != kind {
			log.Fatalf("process %d ran kind %q, not %q", i, r.Kind, kind)
		}
		reps = append(reps, r)
	}
	summarize(reps, dur)
}

func summarize(reps []report, dur time.Duration) {
	var t report
	for _, r := range reps {
		t.Batches += r.Batches
		t.Attempts += r.Attempts
		t.Conflicts += r.Conflicts
		t.Waits = append(t.Waits, r.Waits...)
		t.CPU += r.CPU
		t.RanOut += r.RanOut
	}
	if t.Batches == 0 {
		if t.RanOut > 0 {
			fmt.Printf("batches 0, every request's wait ran out: ran out %d\n", t.RanOut)
			return
		}
		log.Fatal("no batches")
	}
	slices.Sort(t.Waits)
	n := float64(t.Batches)
	fmt.Printf("batches %d (%.0f/s) attempts/batch %.2f conflicts/batch %.2f client CPU/batch %v wait p99 %v longest %v\n",
		t.Batches, n/dur.Seconds(), float64(t.Attempts)/n, float64(t.Conflicts)/n,
		(t.CPU / time.Duration(t.Batches)).Round(time.Microsecond),
		t.Waits[len(t.Waits)*99/100].Round(100*time.Microsecond), t.Waits[len(t.Waits)-1].Round(100*time.Microsecond))
	if flag.Lookup("kind").Value.String() != "" {
		fmt.Printf("ran out %d\n", t.RanOut)
	}
}

// kindRequest is one request of a kind (bench.KindRequests) over the
// keys hot0 ... and the resources bench.PermitName names.
func kindRequest(ask bench.KindAsk, wait time.Duration) slotlock.Request {
	req := slotlock.Request{Wait: wait}
	for _, i := range ask.Exclusive {
		req.Exclusive = append(req.Exclusive, fmt.Sprintf("hot%d", i))
	}
	for _, i := range ask.Shared {
		req.Shared = append(req.Shared, fmt.Sprintf("hot%d", i))
	}
	for _, p := range ask.Permits {
		req.Permits = append(req.Permits, slotlock.Permit{Resource: bench.PermitName(p.Resource), Units: int64(p.Units), Limit: bench.PermitLimit})
	}
	return req
}

// kindContext is worker w's context: its own owner for reentrant leases.
func kindContext(kind string, w int) context.Context {
	if kind == bench.KindReentrant {
		return slotlock.WithOwner(context.Background(), fmt.Sprintf("worker%d", w))
	}
	return context.Background()
}

// cpuTime is this process's user and system CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
