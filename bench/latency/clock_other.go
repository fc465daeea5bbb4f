//go:build !linux

package latency

import (
	"errors"
	"sync"
	"time"
)

// clock falls back to time.Sleep off Linux: correct, but with the runtime's
// coarser granularity (about a millisecond on an idle runtime), which the
// report's measured round trips will show.
type clock struct {
	once   sync.Once
	closed chan struct{}
}

func newClock() (*clock, error) { return &clock{closed: make(chan struct{})}, nil }

func (c *clock) sleep(d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-c.closed:
		return errors.New("latency: clock closed")
	}
}

func (c *clock) close() error {
	c.once.Do(func() { close(c.closed) })
	return nil
}
