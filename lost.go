package slotlock

import (
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

// watchLoss starts watching a lease that was just granted.
func (l *Locker) watchLoss(le *Lease) {
	if l.track == nil {
		return
	}
	slots := make([]uint16, le.set.Len())
	for i, k := range le.set.Keys {
		slots[i] = k.Slot
	}
	w := &tracking.Watch{
		Keys:     le.set.Lock,
		Slots:    slots,
		Holder:   le.who.Holder,
		Deadline: le.Deadline,
		Lost:     le.lose,
		Expired:  le.expire,
	}
	le.mu.Lock()
	le.watch = w
	le.mu.Unlock()
	l.track.Watch(w)
}

// forgetLoss stops watching le. Release calls it before it deletes the
// keys: the invalidations of its own release must not read as a loss.
func (le *Lease) forgetLoss() {
	le.mu.Lock()
	w := le.watch
	le.mu.Unlock()
	if w != nil {
		le.l.track.Forget(w)
	}
}

// rearmLoss tells the tracker that the deadline moved (Extend may move it
// earlier).
func (le *Lease) rearmLoss() {
	le.mu.Lock()
	w := le.watch
	le.mu.Unlock()
	if w != nil {
		le.l.track.Rearm(w)
	}
}
