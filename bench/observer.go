package bench

import (
	"context"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/redis/rueidis"

	"github.com/slotlock/slotlock/internal/rediserr"
)

// observer is everyone else: another application on the same cluster,
// with a client of its own (never delayed), sending one GET at a time,
// about every millisecond, to keys spread over every master. A node runs
// a script alone, so a contender's big script call stalls the observer's
// GETs that reach that node meanwhile; their latency, p99 and max, is the
// contender's cost to everyone else.
type observer struct {
	client rueidis.Client
	ctx    context.Context
	cmds   []rueidis.Completed
	cancel context.CancelFunc
	done   chan struct{}
	mu     sync.Mutex
	lat    []time.Duration
	errs   int
}

// ObserverKeys is how many distinct keys the observer reads: enough to
// reach every master many times over.
const ObserverKeys = 256

func (e *Env) startObserver(ctx context.Context) (*observer, error) {
	client, err := e.WithRTT(0).client()
	if err != nil {
		return nil, err
	}
	cmds := make([]rueidis.Completed, ObserverKeys)
	for i := range cmds {
		cmds[i] = client.B().Get().Key(e.prefix + "observer:" + strconv.Itoa(i)).Build().Pin()
	}
	// Connections and slot map first: the first GET is not the cell's.
	// These GETs come before the cell's first server snapshot (the caller
	// takes it between startObserver and run), so they are not counted as
	// the contender's commands.
	for _, c := range cmds {
		_ = client.Do(ctx, c)
	}
	ctx, cancel := context.WithCancel(ctx)
	return &observer{client: client, ctx: ctx, cmds: cmds, cancel: cancel, done: make(chan struct{})}, nil
}

// start sends the timed GETs, in a goroutine of its own, until stop.
func (o *observer) start() { go o.loop() }

func (o *observer) loop() {
	defer close(o.done)
	rng := rand.New(rand.NewPCG(1, 2))
	for o.ctx.Err() == nil {
		t0 := time.Now()
		err := o.client.Do(o.ctx, o.cmds[rng.IntN(len(o.cmds))]).Error()
		d := time.Since(t0)
		o.mu.Lock()
		if err != nil && !rediserr.IsNil(err) {
			if o.ctx.Err() == nil {
				o.errs++
			}
		} else {
			o.lat = append(o.lat, d)
		}
		o.mu.Unlock()
		// About a millisecond (the runtime's timer granularity):
		// a light load that samples every stall longer than that.
		time.Sleep(500 * time.Microsecond)
	}
}

// stop ends the observer and returns its GETs' latencies and how many
// failed.
func (o *observer) stop() (Dist, int, int) {
	o.cancel()
	<-o.done
	o.client.Close()
	return distOf(o.lat), len(o.lat), o.errs
}
