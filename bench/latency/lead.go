package latency

import (
	"slices"
	"sync"
	"time"
)

// maxLead bounds the calibrated lead: a calibration taken while the machine
// was busy must not turn the clock into a spin loop.
const maxLead = 50 * time.Microsecond

var (
	leadOnce sync.Once
	lead     time.Duration
)

// Lead is how much earlier than a chunk's due time its clock is set: the
// median overshoot of a 100 µs clock sleep, measured once per process (41
// sleeps, about 5 ms) and capped at 50 µs. It removes the wake-up cost that
// would otherwise be added to every delay (about 20 µs per direction on the
// machines this was written on), so that delays are right on average: a
// chunk leaves between Lead early and (when the wake-up is slower than
// usual) some microseconds late, never earlier than Lead before its due
// time, since a timerfd never fires early.
//
// Waiting out the remainder instead was tried and rejected: a goroutine
// that yields in a loop (runtime.Gosched) keeps the run queue non-empty,
// and the Go scheduler polls the network only when its run queues are
// empty (or from sysmon, every 10 ms), so every other connection's wake-up
// waited: 1,000 one-command writes through a 1 ms round trip took 9.2 ms
// instead of about 2. A spin without yielding burns a core that the
// client and Redis share.
func Lead() time.Duration {
	leadOnce.Do(func() {
		c, err := newClock()
		if err != nil {
			return
		}
		defer c.close()
		const d = 100 * time.Microsecond
		over := make([]time.Duration, 0, 41)
		for range cap(over) {
			t0 := time.Now()
			if c.sleep(d) != nil {
				return
			}
			over = append(over, time.Since(t0)-d)
		}
		slices.Sort(over)
		lead = min(max(over[len(over)/2], 0), maxLead)
	})
	return lead
}

// sleepUntil returns about at due: no earlier than Lead before it (or
// with the clock's error once it is closed).
func (c *clock) sleepUntil(due time.Time) error {
	if d := time.Until(due) - Lead(); d > 0 {
		return c.sleep(d)
	}
	return nil
}
