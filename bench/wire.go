package bench

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/rueidis"

	"github.com/slotlock/slotlock/internal/rediserr"
)

// Wire is what a round trip through the environment's connections
// measured, next to what was asked for: the report prints it so that a
// reader can trust the emulated network (timers overshoot; see package
// latency).
type Wire struct {
	Asked time.Duration
	// Ping is one PING; Pipeline is 1,000 GETs of one slot sent in one
	// DoMulti (one node, one flush): it should cost one round trip, not
	// more.
	Ping, Pipeline Dist
}

// WirePipeline is the size of the measured pipeline.
const WirePipeline = 1000

// MeasureWire times n PINGs and n/10 pipelines through a fresh client at
// the given round trip.
func (e *Env) MeasureWire(ctx context.Context, rtt time.Duration, n int) (Wire, error) {
	w := Wire{Asked: rtt}
	c, err := e.WithRTT(rtt).client()
	if err != nil {
		return w, err
	}
	defer c.Close()
	// Keys of one slot (a hash tag): one node, one DoMulti, one flush.
	cmds := make(rueidis.Commands, WirePipeline)
	for i := range cmds {
		cmds[i] = c.B().Get().Key(e.prefix + "wire{w}:" + strconv.Itoa(i)).Build().Pin()
	}
	ping := c.B().Ping().Build().Pin()
	// Warm: connections, slot map.
	for range 10 {
		if err := c.Do(ctx, ping).Error(); err != nil {
			return w, fmt.Errorf("wire: PING: %w", err)
		}
		_ = c.DoMulti(ctx, cmds...)
	}
	var pings, pipes []time.Duration
	for i := range n {
		t0 := time.Now()
		if err := c.Do(ctx, ping).Error(); err != nil {
			return w, fmt.Errorf("wire: PING: %w", err)
		}
		pings = append(pings, time.Since(t0))
		if i%10 == 0 {
			t0 = time.Now()
			for _, r := range c.DoMulti(ctx, cmds...) {
				if err := r.Error(); err != nil && !rediserr.IsNil(err) {
					return w, fmt.Errorf("wire: pipeline: %w", err)
				}
			}
			pipes = append(pipes, time.Since(t0))
		}
	}
	w.Ping, w.Pipeline = distOf(pings), distOf(pipes)
	return w, nil
}
