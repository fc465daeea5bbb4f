package clustertest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"
)

// delayingClient delivers every pub/sub message of Receive a random 0 to
// msgDelay late, each on its own timer: messages overtake each other, and
// a hand-off can arrive after the waiter's next rounds ran (the key given
// away, the waiter in line again under a newer entry: case (b) of
// docs/proposals/direct-grant.md 2.4). Deliveries are serialized, as
// rueidis's are. With callDelay, one call in four (Do, DoMulti, through
// the client or a node's client of Nodes) waits a random 0 to callDelay
// before it is sent: a slow network or a paused process, which reorders
// waiters' rounds against their tickets and so makes younger waiters
// yield keys to older ones (rule Y) while the hand-off of those keys is
// still on its way.
type delayingClient struct {
	rueidis.Client
	msgDelay, callDelay time.Duration

	mu *sync.Mutex // guards r; and serializes deliveries
	r  *rand.Rand
}

func newDelayingClient(c rueidis.Client, msgDelay, callDelay time.Duration, seed uint64) *delayingClient {
	return &delayingClient{Client: c, msgDelay: msgDelay, callDelay: callDelay, mu: &sync.Mutex{}, r: rand.New(rand.NewPCG(seed, 6))}
}

func (c *delayingClient) rand(max time.Duration, p float64) time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	if max <= 0 || c.r.Float64() >= p {
		return 0
	}
	return time.Duration(c.r.Int64N(int64(max) + 1))
}

func (c *delayingClient) Receive(ctx context.Context, subscribe rueidis.Completed, fn func(msg rueidis.PubSubMessage)) error {
	return c.Client.Receive(ctx, subscribe, func(m rueidis.PubSubMessage) {
		time.AfterFunc(c.rand(c.msgDelay, 0.5), func() {
			c.mu.Lock()
			defer c.mu.Unlock()
			fn(m)
		})
	})
}

// wait delays a call, at most until ctx ends.
func (c *delayingClient) wait(ctx context.Context) {
	if d := c.rand(c.callDelay, 0.5); d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
		}
	}
}

func (c *delayingClient) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	c.wait(ctx)
	return c.Client.Do(ctx, cmd)
}

func (c *delayingClient) DoMulti(ctx context.Context, multi ...rueidis.Completed) []rueidis.RedisResult {
	c.wait(ctx)
	return c.Client.DoMulti(ctx, multi...)
}

func (c *delayingClient) Nodes() map[string]rueidis.Client {
	out := map[string]rueidis.Client{}
	for addr, n := range c.Client.Nodes() {
		out[addr] = &delayingClient{Client: n, msgDelay: c.msgDelay, callDelay: c.callDelay, mu: c.mu, r: c.r}
	}
	return out
}

// envHistoryRun sets TestHistoryWithDelayedMessages's length (a
// time.ParseDuration string): 15 s by default, for CI; longer to check
// that a mutation is caught (see the test).
const envHistoryRun = "SLOTLOCK_HISTORY_RUN"

func TestHistoryWithDelayedMessages(t *testing.T) {
	// Eight processes, each one client and one Locker, lock random
	// batches of 1-2 of 6 keys in a loop, holding each 100 ms, while half
	// the pub/sub messages reach them up to 400 ms late and half the
	// calls leave up to 300 ms late (delayingClient). Hand-offs arrive
	// after their key was given away to an older waiter (rule Y: a
	// delayed first round makes an older waiter join a line after a
	// younger one was handed the key) and after the waiter joined the
	// line again; rule F of the evidence makes the waiter ignore them,
	// and the confirm checks every key on the server in any case.
	// The history of every hold (Lock called, Lock returned, Release
	// called or the end seen, at most the lease's Deadline; Release
	// returned; on the machine's monotonic clock) is checked by
	// porcupine: no two holds of a key overlap.
	//
	// The confirm makes this a test of exclusion under late messages
	// and late calls, not of rule F: evidence_test.go proves rule F
	// case by case (a stale message accepted costs a failed confirm).
	e := newEnv(t, 3*time.Minute)
	e.waitReady()
	space := keySpace(6)
	run := 15 * time.Second
	if v := os.Getenv(envHistoryRun); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("%s: %v", envHistoryRun, err)
		}
		run = d
	}
	var procs []*contenderProc
	for i := range 8 {
		procs = append(procs, startContender(t, contenderSpec{Addrs: e.c.Addrs(), Prefix: e.prefix, TTL: 10 * time.Second,
			Space: space, KMax: 2, Seed: uint64(200 + i), Hold: 100 * time.Millisecond,
			MsgDelay: 400 * time.Millisecond, CallDelay: 300 * time.Millisecond, History: true}))
	}
	time.Sleep(run) // the length of the scenario, not an ordering
	t0 := time.Now()
	for _, p := range procs {
		_ = p.stdin.Close() // all at once: each ends its batch in flight first
	}
	h := newHistory(e.tl)
	lost := 0
	for i, p := range procs {
		for _, ev := range p.finish(t, i, 45*time.Second) {
			if ev.Event != "held" {
				continue
			}
			if ev.How == "lost" {
				lost++
			}
			h.hs = append(h.hs, &hold{ID: len(h.hs) + 1, Owner: fmt.Sprintf("process %d", i), Token: ev.Token, Keys: ev.Keys,
				Call: e.tl.fromSys(ev.Call), Granted: e.tl.fromSys(ev.From), End: e.tl.fromSys(ev.To), EndRet: e.tl.fromSys(ev.Ret),
				How: ev.How, ended: true})
		}
	}
	stopped := time.Since(t0)
	v := h.check(t, false)
	t.Logf("stopped in %v, checked in %v", stopped, time.Since(t0)-stopped)
	// A lease found lost at its release: its Release (or conversion)
	// left late, after its Deadline; the holder had stopped counting on
	// it by then (the history ends it there).
	t.Logf("%d holds in %v, %d found lost at their release", v.Holds, run, lost)
	v.requireSafe(t)
	if v.Holds == 0 { // a precondition: how many holds fit in the run is the machine's load
		t.Error("no hold: the history checker checked nothing")
	}
	// What is left behind is checked by the other process tests; here
	// it would cost two queue-entry lives (6 s) of CI time.
}
