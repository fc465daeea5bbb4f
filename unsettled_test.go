package slotlock_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/slotlock/slotlock"
	"github.com/slotlock/slotlock/slot"
)

// keyInSlots returns a key named after base whose slot lies in [lo, hi].
func keyInSlots(t *testing.T, base string, lo, hi uint16) string {
	for i := 0; i < 1_000_000; i++ {
		k := fmt.Sprintf("%s-%d", base, i)
		if s := slot.Sorted([]string{k})[0].Slot; s >= lo && s <= hi {
			return k
		}
	}
	t.Fatalf("no key %s-N in slots %d-%d", base, lo, hi)
	return ""
}

// TestUnsettledTrimGoesOnUnderANewToken: a Lock whose trim has an unknown
// outcome must not be granted under the token the trim carries (the trim
// may run after the next attempt re-took its keys: protocol.ErrUnsettled,
// docs/safety.md). Here every owner-checked call of the acquisition fails
// before it is written (a CleanupTimeout of 1 ns), which the client
// reports like a lost reply. The acquisition must go on under a new
// token, wait for what the old one left (its rollback failed the same
// way: those keys last their TTL, here until the test deletes them), and
// be granted with every key under the new token. The pipeline strategy
// keeps a prefix, so its first attempt takes the keys above the conflict
// (another node's) and must trim them. The TTL outlasts the test: no
// later token can take those keys before the test has read the first
// one's (with a 1 s TTL, a loaded machine read a later token's).
// Mutation: Lock ignoring the trim's outcome (protocol.go): granted under
// the old token.
func TestUnsettledTrimGoesOnUnderANewToken(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, 30*time.Second)
	const ttl = time.Minute
	l := e.locker(slotlock.Options{TTL: ttl, Strategy: slotlock.StrategyPipeline, CleanupTimeout: time.Nanosecond})
	other := e.locker(slotlock.Options{TTL: 30 * time.Second})
	// The conflict's slot comes first in canonical order and is on
	// another master than the rest (slots 0-5460 and 10923-16383 of the
	// harness's three masters).
	conflict := keyInSlots(t, "c", 0, 1000)
	above := []string{keyInSlots(t, "a", 12000, 16383), keyInSlots(t, "b", 12000, 16383)}
	blocker, err := other.TryLock(ctx, conflict)
	require.NoError(t, err)

	done := make(chan error, 1)
	var lease *slotlock.Lease
	go func() {
		var err error
		lease, err = l.Lock(ctx, append([]string{conflict}, above...)...)
		done <- err
	}()
	// The first attempt took the keys above the conflict: read its token.
	var first string
	for first == "" {
		for _, v := range e.lockKeys() {
			if v = strings.TrimSuffix(v, "!"); v != blocker.Token() {
				first = v
			}
		}
		require.NoError(t, ctx.Err(), "the first attempt never took the keys above the conflict")
	}
	// Its keys expire (the test deletes them), and the conflict goes.
	for k, v := range e.lockKeys() {
		if strings.TrimSuffix(v, "!") == first {
			require.NoError(t, e.client.Do(ctx, e.client.B().Del().Key(k).Build()).Error())
		}
	}
	require.NoError(t, blocker.Release(ctx))
	require.NoError(t, <-done)
	defer func() { require.NoError(t, lease.Release(context.Background())) }()

	require.NotEqual(t, first, lease.Token(), "granted under the token whose trim has an unknown outcome")
	e.requireNoneWith(first)
	got := e.lockKeys()
	require.Len(t, got, 3, "lock keys: %v", got)
	for k, v := range got {
		require.Equal(t, lease.Token(), v, "lock key %q", k)
	}
}
