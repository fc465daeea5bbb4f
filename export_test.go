package slotlock

import (
	"github.com/slotlock/slotlock/internal/lockval"
	"github.com/slotlock/slotlock/internal/tracking"
)

// SetAfterFailure installs a hook that sees the token of every failed
// acquisition, so tests can check that it left no key behind.
func (l *Locker) SetAfterFailure(fn func(token string, err error)) { l.afterFailure = fn }

// LocalLen returns the number of keys in the in-process queue.
func (l *Locker) LocalLen() int {
	if l.local == nil {
		return 0
	}
	return l.local.Len()
}

// PerSlot reports whether the engine sends one script per slot.
func (l *Locker) PerSlot() bool { return l.lua.PerSlot() }

// LossStats returns the loss tracker's counters (zero without one).
func (l *Locker) LossStats() tracking.Stats {
	if l.track == nil {
		return tracking.Stats{}
	}
	return l.track.Stats()
}

// ShortID is the short form Inspect shows for a token.
func ShortID(token string) string { return lockval.Short(token) }
