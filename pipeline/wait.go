package pipeline

import (
	"time"

	"github.com/slotlock/slotlock/internal/protocol"
)

// waitFor is the pause before the attempt-th retry of a key held by someone
// else: the waiters' backoff (protocol.WaitBackoff), never longer than the
// holder's remaining TTL plus a millisecond (the key has surely expired by
// then). Without a script there is no waiter's mark and so no release
// message to wait for (the Lua waiter would return at once for an
// unmarked key): a pipeline waiter polls at this pace. holderTTL < 0 means
// the key has no expiry.
func waitFor(holderTTL time.Duration, attempt int) time.Duration {
	d := protocol.WaitBackoff(attempt)
	if holderTTL >= 0 {
		d = min(d, holderTTL+time.Millisecond)
	}
	return d
}
