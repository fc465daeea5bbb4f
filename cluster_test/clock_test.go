package clustertest

import (
	"math"
	"time"
)

// timeline is the one clock of a scenario: nanoseconds since its epoch on
// the test process's monotonic clock. Every grant, release, loss and store
// write is stamped on it, so intervals compare without wall-clock steps.
type timeline struct {
	epoch time.Time
	// sysOffset converts sysMonotonic readings (a helper process's) to the
	// timeline: timeline = sys - sysOffset, within sysError.
	sysOffset, sysError int64
}

func newTimeline() *timeline {
	tl := &timeline{epoch: time.Now()}
	tl.sysError = math.MaxInt64
	// Bracket a system reading between two timeline readings and keep the
	// tightest of a few tries: the conversion error is half the bracket.
	for range 20 {
		a := tl.now()
		s := sysMonotonic()
		b := tl.now()
		if e := (b - a + 1) / 2; e < tl.sysError {
			tl.sysError, tl.sysOffset = e, s-(a+b)/2
		}
	}
	return tl
}

// now is the current time on the timeline.
func (tl *timeline) now() int64 { return int64(time.Since(tl.epoch)) }

// at places a time.Time of this process (with its monotonic reading, as
// time.Now and Lease.Deadline give) on the timeline.
func (tl *timeline) at(t time.Time) int64 { return int64(t.Sub(tl.epoch)) }

// fromSys places a sysMonotonic reading, possibly of another process, on
// the timeline.
func (tl *timeline) fromSys(ns int64) int64 { return ns - tl.sysOffset }

func ms(ns int64) float64 { return float64(ns) / 1e6 }
