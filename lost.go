package slotlock

import (
	"time"

	"github.com/slotlock/slotlock/internal/tracking"
)

// This file connects leases to internal/tracking, which ends a lease within
// milliseconds when the server says one of its lock keys changed and a read
// confirms the loss, or when its deadline passes (docs/design.md, "Seeing a
// lost lease at once"). The hooks in the rest of the package are one call
// each: Locker.acquire (watchLoss), Locker.Close (Tracker.Close),
// Lease.end and Lease.Release (forgetLoss, before the release is sent),
// Lease.Extend (rearmLoss).

// newLossTracker returns the Locker's tracker, or nil with
// Options.NoLossTracking (the watchdog alone then notices losses).
func newLossTracker(l *Locker) *tracking.Tracker {
	if l.opt.NoLossTracking {
		return nil
	}
	return tracking.New(l.client, l.topo)
}

// watchLoss starts watching a lease that was just granted, unless it has
// already ended (the watchdog or a loss may have got there first: then no
// one would forget the watch).
func (l *Locker) watchLoss(le *Lease) {
	if l.track == nil {
		return
	}
	le.mu.Lock()
	if le.ended {
		le.mu.Unlock()
		return
	}
	le.watch = tracking.Watch{Set: le.set, Holder: le.who.Holder, Owner: (*leaseLoss)(le)}
	le.watching = true
	le.mu.Unlock()
	l.track.Watch(&le.watch)
}

// forgetLoss stops watching le, once. Release calls it before it deletes
// the keys: the invalidations of its own release must not read as a loss.
func (le *Lease) forgetLoss() {
	le.mu.Lock()
	watching := le.watching
	le.watching = false
	le.mu.Unlock()
	if watching {
		le.l.track.Forget(&le.watch)
	}
}

// rearmLoss tells the tracker that the deadline moved (Extend may move it
// earlier).
func (le *Lease) rearmLoss() {
	le.mu.Lock()
	watching := le.watching
	le.mu.Unlock()
	if watching {
		le.l.track.Rearm(&le.watch)
	}
}

// leaseLoss is a Lease as the tracker's Owner: a conversion, so watching
// a lease allocates no callbacks.
type leaseLoss Lease

func (o *leaseLoss) Deadline() time.Time { return (*Lease)(o).Deadline() }
func (o *leaseLoss) Lost(idx []int)      { (*Lease)(o).lose(idx) }
func (o *leaseLoss) Expired()            { (*Lease)(o).expire() }
