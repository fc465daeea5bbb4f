package quorum

import (
	"fmt"
	"time"

	"github.com/slotlock/slotlock"
)

// Options configure a quorum Locker. The zero value is the sane default.
type Options struct {
	// Options configure the Locker of every deployment: TTL, renewal,
	// fencing, prefix, strategy and the rest mean what they mean there.
	slotlock.Options
	// ClockDrift is the allowance for the deployments' clocks running
	// faster than the client's: it is taken off every validity window.
	// Zero means TTL/100 + 2 ms (RedLock's factor: 1 % of the TTL, plus
	// the millisecond resolution of expiry on both ends). It must be below
	// the TTL.
	ClockDrift time.Duration
	// AttemptTimeout bounds how long one attempt waits for each
	// deployment: one that has not answered by then counts as refused
	// (a frozen server must not hold up the others). Zero means TTL/10,
	// at most one second. It must be below the TTL minus ClockDrift:
	// otherwise no grant could leave any validity.
	AttemptTimeout time.Duration
}

const maxDefaultAttempt = time.Second

func (o Options) withDefaults() (Options, error) {
	ttl := o.TTL
	if ttl == 0 {
		ttl = slotlock.DefaultTTL
	}
	if o.ClockDrift == 0 {
		o.ClockDrift = ttl/100 + 2*time.Millisecond
	}
	if o.AttemptTimeout == 0 {
		o.AttemptTimeout = min(ttl/10, maxDefaultAttempt)
	}
	switch {
	case o.ClockDrift < 0 || o.ClockDrift >= ttl:
		return o, fmt.Errorf("%w: ClockDrift %v is not in [0, TTL %v)", slotlock.ErrInvalid, o.ClockDrift, ttl)
	case o.AttemptTimeout < 0 || o.AttemptTimeout >= ttl-o.ClockDrift:
		return o, fmt.Errorf("%w: AttemptTimeout %v is not in [0, TTL %v minus ClockDrift %v)", slotlock.ErrInvalid, o.AttemptTimeout, ttl, o.ClockDrift)
	}
	return o, nil
}
