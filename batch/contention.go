package batch

import "sync/atomic"

// contention estimates how often an acquisition of this Engine meets a
// key it cannot take at its first contact with Redis: a moving average
// over the last few acquisitions (weight 1/contentionWindow each; the
// plain mean of the samples while there are fewer, so that a new Locker
// that meets contention knows it at its first sample, not its sixth) of
// whether a Lock's or TryLock's first attempt, or the first reserve round
// of a Lock that skipped it, found every key free. Both samples say the same thing, so
// the estimate keeps learning whichever way the acquisitions go.
//
// It decides two things, each by what the other choice costs when it
// loses (round trips; each also costs its master script calls):
//
//   - Contended (protocol.Queuer): a Lock skips its first attempt and
//     waits by reservation at once. An attempt that finds its keys free
//     is granted in one round trip and released in one: 2. One that
//     fails adds the reserve round and the confirm, and a request with
//     shared keys or permits, or a reentrant lease, a rollback before
//     them: 4 or 5. Going straight to the reservation costs 3 either way.
//     So an attempt is worth it while it fails less than half the time.
//   - bareFits: a plain batch's first attempt sends bare SETs, which cost
//     the master a little less than the script but, when one meets a held
//     key, a round trip more (the script then runs on the keys they did
//     not get): worth it only while nearly every attempt succeeds.
//
// The estimate is per Engine (one per Locker), shared by its goroutines;
// a lost update under a race costs one sample, never a lock: the choice
// changes what an acquisition costs, not what it is granted.
type contention struct {
	est atomic.Uint32 // the miss rate, in units of 1/contentionScale
	n   atomic.Uint32 // samples taken, up to contentionWindow
}

const (
	contentionScale  = 1 << 16
	contentionWindow = 8 // samples: a new one weighs 1/8

	// contendedAt: at this miss rate and above, Contended is true.
	contendedAt = contentionScale / 2
	// bareBelow: below this miss rate, a plain batch's first attempt is
	// bare. One miss in the window lifts the estimate past it.
	bareBelow = contentionScale / contentionWindow
)

// note records one acquisition's first contact: miss when some key was
// not free.
func (c *contention) note(miss bool) {
	var x uint32
	if miss {
		x = contentionScale
	}
	// The weight of this sample: 1/n of the first n, then 1/window.
	w := uint32(contentionWindow)
	if n := c.n.Load(); n < contentionWindow {
		c.n.CompareAndSwap(n, n+1)
		w = n + 1
	}
	for {
		old := c.est.Load()
		nu := old - old/w + x/w
		if old == nu || c.est.CompareAndSwap(old, nu) {
			return
		}
	}
}

// rate is the estimated miss rate, in units of 1/contentionScale.
func (c *contention) rate() uint32 { return c.est.Load() }
