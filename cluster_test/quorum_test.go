package clustertest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/slotlock/slotlock"
	"github.com/slotlock/slotlock/internal/redistest"
	"github.com/slotlock/slotlock/quorum"
)

// TestQuorumUnderFaults runs workers with quorum Lockers over three
// standalone deployments while one deployment is killed (and restarted
// empty after more than a TTL, as RedLock requires of a server without
// persistence) and another is frozen, first past the TTL and then briefly,
// so that it wakes up and runs the grants its clients queued. Every grant
// and end goes into the same history and porcupine checker as the
// cluster scenarios: no two holds of a key may overlap. At the end no key
// may be left on any deployment.
func TestQuorumUnderFaults(t *testing.T) {
	s := chaosScale()
	ctx, cancel := context.WithTimeout(context.Background(), pick(s, 3*time.Minute, 20*time.Minute))
	defer cancel()
	deps := redistest.StartDeploymentsForTest(t, 3, redistest.Options{})
	tl := newTimeline()
	hist := newHistory(tl)
	rep := newReport(t, string(deps[0].Backend()))
	r := strings.NewReplacer("/", ":", "{", "(", "}", ")", " ", "_")
	prefix := "chaos:" + r.Replace(t.Name())
	const ttl = 2 * time.Second
	opt := quorum.Options{
		Options:        slotlock.Options{TTL: ttl, Prefix: prefix, CleanupTimeout: 2 * time.Second},
		AttemptTimeout: 200 * time.Millisecond,
	}
	q := &quorumLoad{ctx: ctx, hist: hist, tl: tl, space: keySpace(24), maxBatch: 5, holdMax: 50 * time.Millisecond, seed: 21}
	// Two client sets, as two processes would have; three workers on each.
	for range 2 {
		clients := make([]rueidis.Client, len(deps))
		for i, d := range deps {
			c, err := d.Client()
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(c.Close)
			clients[i] = c
		}
		for range 3 {
			l, err := quorum.New(clients, opt)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = l.Close() })
			q.lockers = append(q.lockers, l)
		}
	}
	q.start(ttl - opt.ClockDrift)
	traffic := func() { time.Sleep(pick(s, 1500*time.Millisecond, 5*time.Second)) }
	var faults []string
	for round := range pick(s, 1, 4) {
		traffic()
		// A crash: the deployment loses every lock it held. It stays down
		// for more than a TTL, so that every lease it granted has expired
		// elsewhere too before it can vote again.
		killed := deps.Node(round % 3)
		if err := killed.Kill(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(ttl + 500*time.Millisecond)
		if err := killed.Restart(ctx); err != nil {
			t.Fatal(err)
		}
		faults = append(faults, fmt.Sprintf("kill %d", round%3))
		traffic()
		// A freeze past the TTL: renewals there stall, its leases expire
		// while it sleeps, and the other two carry on.
		frozen := deps.Node((round + 1) % 3)
		if err := frozen.Pause(); err != nil {
			t.Fatal(err)
		}
		before := q.grants.Load()
		time.Sleep(ttl + time.Second)
		if q.grants.Load() == before {
			t.Errorf("round %d: no grant while deployment %d was frozen: the other two did not carry on", round, (round+1)%3)
		}
		if err := frozen.Resume(); err != nil {
			t.Fatal(err)
		}
		faults = append(faults, fmt.Sprintf("freeze %d for %v", (round+1)%3, ttl+time.Second))
		traffic()
		// A short freeze: the server wakes up within the TTL and runs the
		// queued grants of attempts that were decided without it.
		short := deps.Node((round + 2) % 3)
		if err := short.Pause(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(400 * time.Millisecond)
		if err := short.Resume(); err != nil {
			t.Fatal(err)
		}
		faults = append(faults, fmt.Sprintf("freeze %d for 400ms", (round+2)%3))
	}
	traffic()
	q.stopAndWait()
	for _, l := range q.lockers {
		_ = l.Close() // waits for attempts still giving back late grants
	}
	v := hist.check(t, false)
	rep.set("deployments", len(deps))
	rep.set("faults", strings.Join(faults, ", "))
	rep.set("grants", int(q.grants.Load()))
	rep.set("attempts", int(q.attempts.Load()))
	rep.set("no_quorum", int(q.noQuorum.Load()))
	rep.set("leases_lost", int(q.lost.Load()))
	rep.set("violations", v.Violations())
	rep.set("double_grants", len(v.Overlaps))
	rep.print()
	v.requireSafe(t)
	if q.grants.Load() == 0 {
		t.Fatal("no grant at all: the scenario checked nothing")
	}
	// Keys that a release could not delete (a frozen deployment) expire by
	// their TTL; nothing may stay longer.
	deadline := time.Now().Add(ttl + 2*time.Second)
	for i := range deps {
		for {
			keys, err := deps.Node(i).Do(ctx, "KEYS", prefix+"*").AsStrSlice()
			if err != nil {
				t.Fatal(err)
			}
			if len(keys) == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("deployment %d: %d keys left, e.g. %q", i, len(keys), keys[0])
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// quorumLoad is workload for quorum Lockers: one worker per Locker, random
// overlapping batches, Lock or TryLock, a short hold, Release; every grant
// and end recorded in the history.
type quorumLoad struct {
	ctx      context.Context
	hist     *history
	tl       *timeline
	lockers  []*quorum.Locker
	space    []string
	maxBatch int
	holdMax  time.Duration
	seed     uint64

	wg                                   sync.WaitGroup
	stop                                 chan struct{}
	attempts, grants, noQuorum, lost, id atomic.Int64
}

// start launches the workers. window is the TTL less the drift allowance:
// a lease's Deadline minus window is when its granting attempt was sent.
func (q *quorumLoad) start(window time.Duration) {
	q.stop = make(chan struct{})
	for i, l := range q.lockers {
		q.wg.Add(1)
		go q.run(i, l, window)
	}
}

func (q *quorumLoad) stopAndWait() {
	close(q.stop)
	q.wg.Wait()
}

func (q *quorumLoad) run(id int, l *quorum.Locker, window time.Duration) {
	defer q.wg.Done()
	r := rand.New(rand.NewPCG(q.seed, uint64(id)))
	owner := fmt.Sprintf("quorum/w%d", id)
	for {
		select {
		case <-q.stop:
			return
		default:
		}
		keys := make([]string, 1+r.IntN(q.maxBatch))
		for i := range keys {
			keys[i] = q.space[r.IntN(len(q.space))]
		}
		ctx, cancel := context.WithTimeout(q.ctx, time.Second)
		var le *quorum.Lease
		var err error
		q.attempts.Add(1)
		called := time.Now()
		if r.IntN(3) == 0 {
			le, err = l.TryLock(ctx, keys...)
		} else {
			le, err = l.Lock(ctx, keys...)
		}
		cancel()
		if err != nil {
			if errors.Is(err, quorum.ErrNoQuorum) {
				q.noQuorum.Add(1)
			}
			time.Sleep(time.Duration(1+r.IntN(10)) * time.Millisecond)
			continue
		}
		q.grants.Add(1)
		view := quorumView{le, fmt.Sprintf("q%d", q.id.Add(1))}
		g := q.hist.granted(owner, view, called, window)
		g.Renews = true
		timer := time.NewTimer(time.Duration(r.Int64N(int64(q.holdMax) + 1)))
		select {
		case <-le.Done():
			seen := q.tl.now()
			q.lost.Add(1)
			q.hist.ended(g, view, seen, seen, "lost")
		case <-timer.C:
		}
		timer.Stop()
		rctx, rcancel := context.WithTimeout(context.Background(), 2*time.Second)
		call := q.tl.now()
		_ = le.Release(rctx)
		q.hist.ended(g, view, call, q.tl.now(), "released")
		rcancel()
	}
}

// quorumView shows a quorum lease to the history: its token is the
// worker's name for it (each deployment has its own), and its fencing
// tokens are per deployment, which the history's single counter per key
// cannot compare (docs/safety.md, "Quorum mode").
type quorumView struct {
	*quorum.Lease
	token string
}

func (v quorumView) Token() string                     { return v.token }
func (v quorumView) FencingToken(string) (int64, bool) { return 0, false }
