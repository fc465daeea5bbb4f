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
// Keys go under -prefix (default "xproc") and are deleted by their own
// releases; a run holds nothing when it ends.
package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
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
}

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
	flag.Parse()
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
		if ls[i], err = slotlock.New(client, slotlock.Options{TTL: 10 * time.Second, Observer: c, Prefix: *prefix}); err != nil {
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
	var batches atomic.Int64
	var mu sync.Mutex
	var waits []time.Duration
	var wg sync.WaitGroup
	for w := range *workers {
		wg.Go(func() {
			l := ls[w%len(ls)]
			r := rand.New(rand.NewPCG(uint64(w), uint64(os.Getpid())))
			var mine []time.Duration
			keys := make([]string, 0, *k)
			for time.Now().Before(stop) {
				keys = keys[:0]
				for len(keys) < *k {
					key := fmt.Sprintf("hot%d", r.IntN(*hot))
					if !slices.Contains(keys, key) {
						keys = append(keys, key)
					}
				}
				t0 := time.Now()
				lease, err := l.Lock(context.Background(), keys...)
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
	rep := report{Batches: batches.Load(), Attempts: c.attempts.Load(), Conflicts: c.conflicts.Load(), Waits: waits, CPU: cpuTime() - cpu0}
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
	}
	if t.Batches == 0 {
		log.Fatal("no batches")
	}
	slices.Sort(t.Waits)
	n := float64(t.Batches)
	fmt.Printf("batches %d (%.0f/s) attempts/batch %.2f conflicts/batch %.2f client CPU/batch %v wait p99 %v longest %v\n",
		t.Batches, n/dur.Seconds(), float64(t.Attempts)/n, float64(t.Conflicts)/n,
		(t.CPU / time.Duration(t.Batches)).Round(time.Microsecond),
		t.Waits[len(t.Waits)*99/100].Round(100*time.Microsecond), t.Waits[len(t.Waits)-1].Round(100*time.Microsecond))
}

// cpuTime is this process's user and system CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
