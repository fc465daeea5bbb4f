package clustertest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"

	"github.com/slotlock/slotlock"
)

// workload is a pool of workers that lock random overlapping batches of one
// key space, hold them a little (writing through the fenced store if there
// is one) and release them, recording every grant and end in the history.
// Each worker has its own Locker, spread over a few clients, so workers meet
// in Redis as separate processes would.
type workload struct {
	e        *env
	name     string
	opt      slotlock.Options // TTL must be set
	space    []string
	workers  int
	clients  int
	maxBatch int
	// attempt bounds each Lock and TryLock.
	attempt time.Duration
	// holdMax is the longest a worker keeps a lease.
	holdMax time.Duration
	store   *fencedStore
	seed    uint64
	// requests makes every other worker take Locker.Acquire requests
	// instead of Lock and TryLock: shared keys, sometimes an exclusive one
	// beside them, and sometimes permits of one of permitSpace's
	// resources (limit permitLimit), so that the history checks readers
	// against writers and the permit limit under the scenario's faults.
	requests bool

	wg      sync.WaitGroup
	stop    chan struct{}
	stats   workStats
	errMu   sync.Mutex
	errSeen map[string]int
}

type workStats struct {
	attempts, grants, conflicts, timeouts, replicas, others atomic.Int64
	lost, releaseErrs                                       atomic.Int64
	requests                                                atomic.Int64 // grants of Locker.Acquire
}

// start launches the workers; stopAndWait ends them.
func (w *workload) start() {
	if w.clients == 0 {
		w.clients = 2
	}
	clients := make([]rueidis.Client, w.clients)
	for i := range clients {
		clients[i] = w.e.client()
	}
	lockers := make([]*slotlock.Locker, w.workers)
	for i := range lockers {
		lockers[i] = w.e.locker(clients[i%len(clients)], w.opt)
	}
	w.startWith(lockers)
}

// startWith launches one worker per Locker, for a run that starts the
// workload many times over the same Lockers (the soak).
func (w *workload) startWith(lockers []*slotlock.Locker) {
	if w.attempt == 0 {
		w.attempt = 2 * time.Second
	}
	if w.maxBatch == 0 {
		w.maxBatch = 8
	}
	w.stop = make(chan struct{})
	w.errSeen = map[string]int{}
	for i, l := range lockers {
		w.wg.Add(1)
		go w.run(i, l)
	}
}

func (w *workload) stopAndWait() {
	close(w.stop)
	w.wg.Wait()
}

func (w *workload) stopped() bool {
	select {
	case <-w.stop:
		return true
	default:
		return false
	}
}

func (w *workload) run(id int, l *slotlock.Locker) {
	defer w.wg.Done()
	owner := fmt.Sprintf("%s/w%d", w.name, id)
	r := rand.New(rand.NewPCG(w.seed, uint64(id)))
	requests := w.requests && id%2 == 1
	// With requests, every fourth worker's Lock and TryLock are
	// reentrant leases, so that hold sets meet the faults: each of its own
	// owner, since the checker's exclusion and fencing order hold between
	// owners, and leases of one owner share a key its earlier lease could
	// not release (a release that timed out in a fault).
	reentrant := w.requests && id%4 == 2
	for n := 0; !w.stopped(); n++ {
		keys := make([]string, 1+r.IntN(w.maxBatch))
		for i := range keys {
			keys[i] = w.space[r.IntN(len(w.space))]
		}
		ctx, cancel := context.WithTimeout(w.e.ctx, w.attempt)
		if reentrant {
			ctx = slotlock.WithOwner(ctx, fmt.Sprintf("%s#%d", owner, n))
		}
		var lease *slotlock.Lease
		var err error
		var req slotlock.Request
		w.stats.attempts.Add(1)
		called := time.Now()
		switch {
		case requests:
			req = w.request(keys, r)
			lease, err = l.Acquire(ctx, req)
		case r.IntN(3) == 0:
			lease, err = l.TryLock(ctx, keys...)
		default:
			lease, err = l.Lock(ctx, keys...)
		}
		cancel()
		if err != nil {
			w.failed(err, r)
			continue
		}
		w.stats.grants.Add(1)
		var g *hold
		if requests {
			w.stats.requests.Add(1)
			g = w.e.hist.grantedRequest(owner, lease, req, called, w.opt.TTL)
		} else {
			g = w.e.hist.granted(owner, lease, called, w.opt.TTL)
		}
		g.Renews = w.opt.Renew == slotlock.RenewAlways
		w.hold(lease, g, r)
	}
}

// permitSpace are the workloads' counted resources: few, so that takers
// meet at the limit, and spread over the masters by their names' slots.
var permitSpace = []string{"pool:0", "pool:1", "pool:2", "pool:3"}

const permitLimit = 2

// mixedRequest turns a batch of random keys into a Locker.Acquire request:
// the keys shared, one of them exclusive in a third of the requests,
// permits of one resource in half of them; waiting as long as it takes.
func mixedRequest(keys []string, r *rand.Rand) slotlock.Request {
	slices.Sort(keys)
	keys = slices.Compact(keys) // a key both shared and exclusive is refused
	req := slotlock.Request{Shared: keys, Wait: slotlock.WaitForever}
	if r.IntN(3) == 0 {
		req.Exclusive, req.Shared = keys[:1], keys[1:]
	}
	if r.IntN(2) == 0 {
		req.Permits = []slotlock.Permit{{Resource: permitSpace[r.IntN(len(permitSpace))], Units: 1 + r.Int64N(2), Limit: permitLimit}}
	}
	return req
}

// request is mixedRequest with the wait of TryLock in a third of them.
func (w *workload) request(keys []string, r *rand.Rand) slotlock.Request {
	req := mixedRequest(keys, r)
	if r.IntN(3) == 0 {
		req.Wait = 0
	}
	return req
}

// hold is the critical section: write each key through the store (if any)
// while the lease looks alive, wait a random time or until the lease ends,
// then release.
func (w *workload) hold(lease *slotlock.Lease, g *hold, r *rand.Rand) {
	tl := w.e.tl
	if w.store != nil && lease.Err() == nil {
		for _, k := range g.Keys {
			w.store.write(k, g.Fences[k], g.ID)
		}
	}
	d := time.Duration(r.Int64N(int64(w.holdMax) + 1))
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-lease.Done():
		seen := tl.now()
		w.stats.lost.Add(1)
		w.e.hist.ended(g, lease, seen, seen, "lost")
		// Release still cleans up what the lease may hold.
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_ = lease.Release(ctx)
		cancel()
		return
	case <-timer.C:
	}
	if w.store != nil && lease.Err() == nil {
		for _, k := range g.Keys {
			w.store.write(k, g.Fences[k], g.ID)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	call := tl.now()
	err := lease.Release(ctx)
	ret := tl.now()
	cancel()
	w.e.hist.ended(g, lease, call, ret, "released")
	if err != nil {
		w.stats.releaseErrs.Add(1)
		w.noteErr("release: " + short(err))
		if errors.Is(err, context.DeadlineExceeded) {
			w.e.abandon(lease.Token())
		}
	}
}

func (w *workload) failed(err error, r *rand.Rand) {
	switch {
	case errors.Is(err, slotlock.ErrNotAcquired):
		w.stats.conflicts.Add(1)
		time.Sleep(time.Duration(r.IntN(2000)) * time.Microsecond)
		return
	case errors.Is(err, context.DeadlineExceeded):
		w.stats.timeouts.Add(1)
	case errors.Is(err, slotlock.ErrReplicas):
		w.stats.replicas.Add(1)
	default:
		w.stats.others.Add(1)
	}
	w.noteErr(short(err))
	// Nodes down or moving: do not spin.
	time.Sleep(time.Duration(10+r.IntN(20)) * time.Millisecond)
}

func (w *workload) noteErr(s string) {
	w.errMu.Lock()
	w.errSeen[s]++
	w.errMu.Unlock()
}

// short cuts an error message to its first 160 bytes, for counting kinds.
func short(err error) string {
	s := err.Error()
	if len(s) > 160 {
		s = s[:160] + "..."
	}
	return s
}

// record puts the workload's counts into the report and logs the most
// frequent errors.
func (w *workload) record(rep *report) {
	rep.add("attempts", int(w.stats.attempts.Load()))
	rep.add("grants", int(w.stats.grants.Load()))
	if w.requests {
		rep.add("request_grants", int(w.stats.requests.Load()))
	}
	rep.add("conflicts", int(w.stats.conflicts.Load()))
	rep.add("timeouts", int(w.stats.timeouts.Load()))
	rep.add("replica_errors", int(w.stats.replicas.Load()))
	rep.add("other_errors", int(w.stats.others.Load()))
	rep.add("leases_lost", int(w.stats.lost.Load()))
	rep.add("release_errors", int(w.stats.releaseErrs.Load()))
	w.errMu.Lock()
	defer w.errMu.Unlock()
	type kv struct {
		k string
		n int
	}
	var top []kv
	for k, n := range w.errSeen {
		top = append(top, kv{k, n})
	}
	for i := range top {
		for j := i + 1; j < len(top); j++ {
			if top[j].n > top[i].n {
				top[i], top[j] = top[j], top[i]
			}
		}
	}
	for i, e := range top {
		if i == 5 {
			break
		}
		w.e.t.Logf("%s: %d x %s", w.name, e.n, e.k)
	}
}
