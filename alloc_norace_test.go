//go:build !race

package slotlock_test

// The race detector changes what escapes and allocates: allocation
// counts are measured without it (make test runs this file in a second,
// race-free pass).

import (
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/slotlock/slotlock"
)

// Without an Observer, Lock keeps no reference to the caller's key slice:
// a variadic call allocates no more than a call with a slice the caller
// already has. (Handing the slice to an Observer made it escape, and
// cost every Lock an allocation, observer or not.)
func TestNoObserverCostsNoAllocation(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, time.Minute)
	l := e.locker(slotlock.Options{TTL: 10 * time.Second, NoLossTracking: true, NoLocalQueue: true})
	run := func(lock func() (*slotlock.Lease, error)) float64 {
		return testing.AllocsPerRun(300, func() {
			lease, err := lock()
			if err != nil {
				t.Fatal(err)
			}
			if err := lease.Release(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
	keys := []string{"hot"}
	variadic := run(func() (*slotlock.Lease, error) { return l.Lock(ctx, "hot") })
	slice := run(func() (*slotlock.Lease, error) { return l.Lock(ctx, keys...) })
	t.Logf("allocations per Lock+Release: variadic %.0f, slice %.0f", variadic, slice)
	require.Equal(t, slice, variadic)

	// A Logger costs no allocation either: the protocol's counts live in
	// the lease, and the end of a lease is matched without errors.As.
	logged := e.locker(slotlock.Options{TTL: 10 * time.Second, NoLossTracking: true, NoLocalQueue: true,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	withLog := run(func() (*slotlock.Lease, error) { return logged.Lock(ctx, "hot") })
	t.Logf("with a Logger: %.0f", withLog)
	require.Equal(t, variadic, withLog)
}
