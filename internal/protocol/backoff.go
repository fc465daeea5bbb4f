package protocol

import (
	"context"
	"math/rand/v2"
	"time"
)

// The pauses of the protocol: one curve for retries after a moved slot or a
// lost reply, one for waiting on a key held by someone else.

// Backoff is the pause before the round-th retry after a stale topology or
// a lost reply: short, because a moved slot is usually settled within
// milliseconds (1 ms doubling to 64 ms).
func Backoff(round int) time.Duration {
	return time.Millisecond << min(round, 6)
}

// Bounds of WaitBackoff. A Lua waiter is woken by the release message; its
// timer only covers what pub/sub cannot see (a release by a script-free
// holder, subscriptions dropped by a failover), and a pipeline waiter,
// which has no message, polls at this pace: so it starts at tens of
// milliseconds, not at a polling rate.
const (
	MinWait = 50 * time.Millisecond
	MaxWait = time.Second
)

// WaitBackoff is the attempt-th pause of a waiter on a held key: MinWait
// doubling to MaxWait, half of it random so that waiters do not retry in
// lockstep. Callers cap it by the holder's remaining TTL.
func WaitBackoff(attempt int) time.Duration {
	return Jittered(attempt, MinWait, MaxWait)
}

// Jittered is the attempt-th pause of a curve that doubles from first to
// most, half of it random so that callers that met once do not meet again
// in lockstep.
func Jittered(attempt int, first, most time.Duration) time.Duration {
	d := min(most, first<<min(attempt, 10))
	return d/2 + rand.N(d/2+1)
}

// SleepCtx sleeps for d, or until ctx ends (then it returns ctx's cause).
func SleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}
