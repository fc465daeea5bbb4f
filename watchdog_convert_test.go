package slotlock

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/slotlock/slotlock/internal/lockval"
	"github.com/slotlock/slotlock/internal/protocol"
	"github.com/slotlock/slotlock/slot"
)

// The conversion of a lease granted in reserved form (a direct grant,
// docs/proposals/direct-grant.md 3.2), against a fake engine: no Redis, so
// the timer alone is under test.

// convEngine records the renewals and releases a Locker sends it. Its
// first fail renewals (all with failAll) fail as a lost reply would.
type convEngine struct {
	mu       sync.Mutex
	fail     int
	failAll  bool
	extends  []convCall
	releases []protocol.Who
	extended chan struct{} // one send per ExtendMany call, never blocking
}

type convCall struct {
	at   time.Time
	jobs []protocol.ExtendJob
}

var errConvLost = errors.New("conversion reply lost")

func newConvEngine() *convEngine { return &convEngine{extended: make(chan struct{}, 64)} }

func (e *convEngine) ExtendMany(_ context.Context, jobs []protocol.ExtendJob) []protocol.OwnerResult {
	e.mu.Lock()
	e.extends = append(e.extends, convCall{at: time.Now(), jobs: jobs})
	failing := e.failAll || e.fail > 0
	e.fail--
	e.mu.Unlock()
	out := make([]protocol.OwnerResult, len(jobs))
	if failing {
		for i, j := range jobs {
			out[i] = protocol.OwnerResult{Failed: allOf(j.Set.Len()), Err: errConvLost}
		}
	}
	select {
	case e.extended <- struct{}{}:
	default:
	}
	return out
}

func (e *convEngine) Release(_ context.Context, _ *protocol.Set, _ []int, who protocol.Who) protocol.OwnerResult {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.releases = append(e.releases, who)
	return protocol.OwnerResult{}
}

func (e *convEngine) Attempt(context.Context, *protocol.Set, int, *protocol.Request, protocol.AttemptOptions) protocol.Attempt {
	panic("not used")
}

func (e *convEngine) Extend(context.Context, *protocol.Set, []int, protocol.Who, time.Duration) protocol.OwnerResult {
	panic("not used")
}

func (e *convEngine) Wait(context.Context, *protocol.Set, int, protocol.Conflict, *protocol.Request, int, time.Duration) error {
	panic("not used")
}

func (e *convEngine) RefreshesHeld() bool { return true }

func (e *convEngine) calls() []convCall {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]convCall(nil), e.extends...)
}

// awaitExtends waits until the engine has seen n renewals.
func (e *convEngine) awaitExtends(t *testing.T, n int) []convCall {
	t.Helper()
	limit := time.After(3 * time.Second)
	for {
		if c := e.calls(); len(c) >= n {
			return c
		}
		select {
		case <-e.extended:
		case <-limit:
			t.Fatalf("%d renewals sent, want %d", len(e.calls()), n)
		}
	}
}

const convTTL = 10 * time.Second // the tick's period, TTL/3, is far off

// convLease returns a lease of two keys granted at the returned moment,
// with its keys in reserved form (Deadline R ahead) or held (the TTL
// ahead), watched by a watchdog of its own; no loss tracker, no local
// queue.
func convLease(t *testing.T, eng *convEngine, reserved bool) (*Lease, time.Time) {
	t.Helper()
	return convLeaseUntil(t, eng, reserved, lockval.ReserveTTL)
}

// convLeaseUntil is convLease with a reserved lease's Deadline d after its
// grant.
func convLeaseUntil(t *testing.T, eng *convEngine, reserved bool, d time.Duration) (*Lease, time.Time) {
	t.Helper()
	l := &Locker{opt: Options{TTL: convTTL, ReplicaTimeout: time.Second}}
	l.dog = newWatchdog(l)
	t.Cleanup(l.dog.close)
	names, err := slot.NewNamer("conv")
	require.NoError(t, err)
	le := newLease(l, protocol.NewSet(names, []string{"a", "b"}), "tok", context.Background())
	le.eng = eng
	le.req.TTL = convTTL
	at := time.Now()
	g := protocol.Grant{Deadline: at.Add(convTTL), At: at}
	if reserved {
		g = protocol.Grant{Deadline: at.Add(d), Reserved: true, At: at}
	}
	le.granted(g)
	l.dog.add(le)
	return le, at
}

func TestConversionIsTheFirstRenewalAtAQuarterOfR(t *testing.T) {
	// Mutations checked: convertAfter = 0 (converting at the grant: the
	// call comes before At + R/4); add not scheduling the conversion (no
	// renewal before the deadline: the tick is TTL/3 away); converted not
	// setting convertedAt (ReservedUntil zero after the conversion).
	eng := newConvEngine()
	le, at := convLease(t, eng, true)
	d := le.Deadline()
	assert.True(t, (*leaseLoss)(le).ReservedUntil().After(time.Now()), "the tracker takes reservations as held")
	c := eng.awaitExtends(t, 1)[0]
	assert.False(t, c.at.Before(at.Add(lockval.ReserveTTL/4)), "converted %v after the grant, before R/4", c.at.Sub(at))
	assert.True(t, c.at.Before(d), "converted %v after the grant, at or past the deadline", c.at.Sub(at))
	require.Len(t, c.jobs, 1)
	assert.Equal(t, "tok", c.jobs[0].Who.Holder)
	assert.Nil(t, c.jobs[0].Idx, "every key")
	assert.Equal(t, convTTL, c.jobs[0].TTL)
	// The deadline moves to the send plus the TTL, and the lease is no
	// longer in reserved form: its release takes the one-key path again.
	require.Eventually(t, func() bool { return le.Deadline().After(d) }, 2*time.Second, time.Millisecond)
	assert.False(t, le.Deadline().After(c.at.Add(convTTL)))
	assert.False(t, le.Deadline().Before(at.Add(lockval.ReserveTTL/4).Add(convTTL)))
	// From the conversion's reply on, a reservation naming the lease is
	// a loss to the tracker (a call run late).
	until := (*leaseLoss)(le).ReservedUntil()
	assert.False(t, until.Before(c.at), "reservations held only in reads sent before %v, the conversion was sent at %v", until, c.at)
	assert.False(t, until.After(time.Now()))
	require.NoError(t, le.Err())
	require.NoError(t, le.Release(context.Background()))
	require.Len(t, eng.releases, 1)
	assert.False(t, eng.releases[0].Reserved)
	assert.Len(t, eng.calls(), 1, "one conversion, then the tick (TTL/3 away)")
}

// TestConversionBeforeAnEarlyDeadline: a lease granted directly on
// evidence that leaves less than R/2 (rule M accepts R/4) converts R/4
// before its deadline, not R/4 after its grant, so that its retries still
// fit. Mutation checked: conversionDue ignoring the deadline (sent at
// At + R/4, 0.05 R before the deadline).
func TestConversionBeforeAnEarlyDeadline(t *testing.T) {
	eng := newConvEngine()
	le, at := convLeaseUntil(t, eng, true, lockval.ReserveTTL*3/10)
	d := le.Deadline()
	c := eng.awaitExtends(t, 1)[0]
	assert.False(t, c.at.After(d.Add(-lockval.ReserveTTL/4).Add(20*time.Millisecond)), "converted %v after the grant, less than R/4 before the deadline (%v after it)", c.at.Sub(at), d.Sub(at))
	require.Eventually(t, func() bool { return le.Deadline().After(d) }, 2*time.Second, time.Millisecond)
	require.NoError(t, le.Err())
	require.NoError(t, le.Release(context.Background()))
}

func TestConversionRetriedEverySixteenthOfR(t *testing.T) {
	// Mutation checked: retryConversion doing nothing (the lease ends at
	// its deadline after one failed conversion: no third call).
	eng := newConvEngine()
	eng.fail = 2
	le, at := convLease(t, eng, true)
	d := le.Deadline()
	c := eng.awaitExtends(t, 3)
	assert.False(t, c[0].at.Before(at.Add(lockval.ReserveTTL/4)))
	for i := 1; i < 3; i++ {
		assert.GreaterOrEqual(t, c[i].at.Sub(c[i-1].at), lockval.ReserveTTL/16, "retry %d", i)
	}
	assert.True(t, c[2].at.Before(d), "third conversion %v after the grant", c[2].at.Sub(at))
	require.Eventually(t, func() bool { return le.Deadline().After(d) }, 2*time.Second, time.Millisecond)
	require.NoError(t, le.Err())
	assert.False(t, le.converting(), "still in reserved form")
}

func TestConversionThatNeverLandsEndsTheLeaseAtItsDeadline(t *testing.T) {
	// No loss tracker here: the conversion loop itself ends the lease.
	// Mutation checked: convertBatch retrying past the deadline instead
	// of ending the lease (it ends only at the tick, TTL/3 later).
	eng := newConvEngine()
	eng.failAll = true
	le, _ := convLease(t, eng, true)
	d := le.Deadline()
	select {
	case <-le.Done():
	case <-time.After(3 * time.Second):
		t.Fatal("the lease did not end")
	}
	ended := time.Now()
	assert.False(t, ended.Before(d), "ended %v before its deadline", d.Sub(ended))
	assert.Less(t, ended.Sub(d), 250*time.Millisecond, "ended long after its deadline")
	assert.ErrorIs(t, le.Err(), ErrLeaseLost)
	assert.GreaterOrEqual(t, len(eng.calls()), 2, "retried")
	for _, c := range eng.calls() {
		assert.True(t, c.at.Before(d), "a conversion sent past the deadline")
	}
}

func TestReleaseBeforeTheConversionSendsNone(t *testing.T) {
	// Mutations checked: Lease.release passing le.who as it is (the
	// release not told the keys are in reserved form); remove keeping the
	// conversion and convertBatch not checking that the lease ended (a
	// conversion after the release).
	eng := newConvEngine()
	le, at := convLease(t, eng, true)
	require.NoError(t, le.Release(context.Background()))
	require.Len(t, eng.releases, 1)
	assert.True(t, eng.releases[0].Reserved, "released as a lease in reserved form")
	assert.Equal(t, "tok", eng.releases[0].Holder)
	// Past the moment the conversion would have been due, and its
	// deadline: nothing was sent.
	time.Sleep(time.Until(at.Add(lockval.ReserveTTL + 50*time.Millisecond)))
	assert.Empty(t, eng.calls())
}

func TestHeldLeaseIsNotConverted(t *testing.T) {
	// A lease granted with held keys renews at TTL/3 only. Mutation
	// checked: conversionDue reporting every lease and convertBatch not
	// checking whether the lease is in reserved form (converting).
	eng := newConvEngine()
	le, at := convLease(t, eng, false)
	time.Sleep(time.Until(at.Add(lockval.ReserveTTL)))
	assert.Empty(t, eng.calls())
	assert.True(t, (*leaseLoss)(le).ReservedUntil().IsZero(), "a reservation is never this lease's")
	require.NoError(t, le.Release(context.Background()))
	assert.False(t, eng.releases[0].Reserved)
}
