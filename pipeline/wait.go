package pipeline

import (
	"context"
	"math/rand/v2"
	"time"
)

// Bounds of a waiter's backoff. Without a script there is no waiter's mark
// and so no release message to wait for (batch.Waker.Wait would return at
// once for an unmarked key): a pipeline waiter polls, starting at tens of
// milliseconds so that it does not hammer the holder's node.
const (
	minWait = 50 * time.Millisecond
	maxWait = time.Second
)

// waitFor is the pause before the attempt-th retry of a key held by someone
// else: an exponential backoff with jitter (so that waiters do not retry in
// lockstep), never longer than the holder's remaining TTL plus a
// millisecond (the key has surely expired by then). holderTTL < 0 means
// the key has no expiry.
func waitFor(holderTTL time.Duration, attempt int) time.Duration {
	d := min(maxWait, minWait<<min(attempt, 10))
	d = d/2 + rand.N(d/2+1) // half fixed, half jitter
	if holderTTL >= 0 {
		d = min(d, holderTTL+time.Millisecond)
	}
	return d
}

// retryPause is the pause before trying again after a moved slot or a lost
// reply: short, because a moved slot is usually settled within
// milliseconds.
func retryPause(round int) time.Duration {
	return time.Millisecond << min(round, 6)
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}
