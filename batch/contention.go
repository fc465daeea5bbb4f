package batch

import (
	"sync/atomic"

	"github.com/slotlock/slotlock/internal/protocol"
	"github.com/slotlock/slotlock/slot"
)

// contention estimates, slot by slot, how often a key this Engine asks for
// is found held at an acquisition's first contact with Redis (a Lock's or
// TryLock's first attempt, or the first reserve round of a Lock that
// skipped it): per slot, a moving average over the last few contacts of
// its keys (weight 1/contentionWindow each; the mean of the samples while
// there are fewer, so that a slot found held once is known at once, not
// after six contacts) of whether the key was held. A batch finds every key
// free with the product, over its keys, of one minus their slot's rate.
//
// Slot by slot, because one Locker serves hot keys and cold ones alike:
// with one estimate per Locker, its hot batches' misses sent its cold
// batches to the reservation (a round trip more) and kept them from bare
// SETs, or its cold batches' hits sent hot ones to attempts that fail. A
// slot holds a key and its companions only; the estimate of a cold key
// that shares a slot with a hot one is the hot one's (16,384 slots: rare).
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
// The estimates are per Engine (one per Locker), shared by its goroutines;
// a lost update under a race costs one sample, never a lock: the choice
// changes what an acquisition costs, not what it is granted. The table
// (64 KiB) is made at the first key found held: an Engine that never
// meets one costs nothing and reads nothing per key (its hits before that
// leave no trace: a slot's first miss counts as its first sample).
type contention struct {
	// slots[s] is slot s's samples taken (up to contentionWindow) above
	// bit sampleShift, and its miss rate (units of 1/contentionScale)
	// below.
	slots atomic.Pointer[[slot.Count]atomic.Uint32]
	// unseen, in the same form, is how often a key of a slot without a
	// sample was found held at its first contact: such a slot's estimate.
	// A Locker on a few hot keys learns at its first miss that the ones
	// it has not met yet are hot too; one on many cold keys, that its
	// unmet keys are free, whatever its hot ones do.
	unseen atomic.Uint32
}

const (
	contentionScale  = 1 << 16
	contentionWindow = 8 // samples: a new one weighs 1/8
	sampleShift      = 24
	rateMask         = 1<<sampleShift - 1

	// contendedAt: a batch that finds every key free with this chance or
	// less is contended.
	contendedAt = 0.5
	// bareAbove: a plain batch's first attempt is bare when it finds
	// every key free with more than this chance. One miss of a key's
	// slot in its last eight contacts is past it.
	bareAbove = 1 - 1.0/contentionWindow
)

// sample adds x (a miss rate, 0 to contentionScale) to the record w.
func sample(w *atomic.Uint32, x uint32) {
	for {
		old := w.Load()
		n, rate := old>>sampleShift, old&rateMask
		if n < contentionWindow {
			n++ // the mean of the first samples: this one weighs 1/n
		}
		nu := n<<sampleShift | (rate - rate/n + x/n)
		if old == nu || w.CompareAndSwap(old, nu) {
			return
		}
	}
}

// met records an acquisition's first contact: keys [0, upto) of set were
// contacted (a prefix attempt stops at its first held key), and held, in
// ascending order, are the indices of those found held.
func (c *contention) met(set *protocol.Set, upto int, held []int) {
	upto = min(upto, set.Len())
	t := c.slots.Load()
	if t == nil {
		if len(held) == 0 {
			// No key was ever found held: every estimate is 0, and stays.
			return
		}
		c.slots.CompareAndSwap(nil, new([slot.Count]atomic.Uint32))
		t = c.slots.Load()
	}
	var unmet, unmetHeld uint32
	for i := range upto {
		miss := len(held) > 0 && held[0] == i
		if miss {
			held = held[1:]
		}
		w := &t[set.Keys[i].Slot]
		if w.Load()>>sampleShift == 0 {
			unmet++
			if miss {
				unmetHeld++
			}
		}
		x := uint32(0)
		if miss {
			x = contentionScale
		}
		sample(w, x)
	}
	if unmet > 0 {
		sample(&c.unseen, unmetHeld*contentionScale/unmet)
	}
}

// freeChance is the estimated chance that keys [from, ..) of set are all
// free; it stops counting once it is at most floor.
func (c *contention) freeChance(set *protocol.Set, from int, floor float64) float64 {
	t := c.slots.Load()
	if t == nil {
		return 1
	}
	unseen := c.unseen.Load() & rateMask
	p := 1.0
	for i := from; i < set.Len() && p > floor; i++ {
		rate := t[set.Keys[i].Slot].Load()
		if rate>>sampleShift == 0 {
			rate = unseen
		}
		if rate &= rateMask; rate > 0 {
			p *= 1 - float64(rate)/contentionScale
		}
	}
	return p
}

// contended reports whether a Lock of set should wait by reservation at once.
func (c *contention) contended(set *protocol.Set) bool {
	return c.freeChance(set, 0, contendedAt) <= contendedAt
}

// bare reports whether the first attempt at keys [from, ..) of set should
// be bare SETs.
func (c *contention) bare(set *protocol.Set, from int) bool {
	return c.freeChance(set, from, bareAbove) > bareAbove
}
