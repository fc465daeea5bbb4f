package slotlock_test

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/slotlock/slotlock"
	"github.com/slotlock/slotlock/internal/lockval"
)

// Readers and writers waiting by reservation for one shared key
// (docs/design.md, "Shared keys and permits"). Every Locker sits on a
// client of its own, as in separate processes: they meet only in Redis.

// ownLocker returns a Locker on a client of its own.
func (e *env) ownLocker(opt slotlock.Options) *slotlock.Locker {
	e.t.Helper()
	client, err := e.c.Client()
	require.NoError(e.t, err)
	e.t.Cleanup(client.Close)
	opt.Prefix = e.prefix
	l, err := slotlock.New(client, opt)
	require.NoError(e.t, err)
	e.t.Cleanup(func() { _ = l.Close() })
	return l
}

// TestReadersQueuedTogetherAreGrantedTogether: readers that wait behind a
// writer for one key are granted together when it releases: each holds
// the key until every one of them holds it. Readers serialised behind
// each other would never all hold it, and their Waits would run out.
// Mutation: the confirm of a reader (shared_acquire.lua mode 'c')
// counting a key held shared as busy (each reader waits for the one
// before it to release; the Waits run out). Readers that see writers in
// one another's entries are slower, not serialised: every round of theirs
// leaves their own entry, so that mutation is not caught here.
func TestReadersQueuedTogetherAreGrantedTogether(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			ctx := ctxT(t, 60*time.Second)
			const k, n = "rt:k", 6
			opt := slotlock.Options{TTL: 30 * time.Second, PerSlot: m.perSlot}
			w, err := e.ownLocker(opt).Lock(ctx, k)
			require.NoError(t, err)

			var all sync.WaitGroup
			all.Add(n)
			done := make(chan error, n)
			for range n {
				l := e.ownLocker(opt)
				go func() {
					le, err := l.Acquire(ctx, slotlock.Request{Shared: []string{k}, Wait: 20 * time.Second})
					if err != nil {
						all.Done()
						done <- err
						return
					}
					all.Done()
					all.Wait() // every reader holds k at once
					done <- le.Release(ctx)
				}()
			}
			require.Eventually(t, func() bool { return e.queueLen(ctx, k) == n }, 10*time.Second, time.Millisecond,
				"the readers stand in k's line")
			for _, m := range e.lineMembers(ctx, k) {
				require.True(t, lockval.QueueEntry(m).Reader, "not a reader's entry: %q", m)
			}
			require.NoError(t, w.Release(ctx))
			for range n {
				require.NoError(t, <-done)
			}
			require.Empty(t, e.lockKeys())
		})
	}
}

// TestAWriterIsNotStarvedByReaders: a writer waiting for a key held
// shared is granted before a reader that came after it, and readers are
// not starved by the writer: that reader is granted after it. The reader
// comes while the writer waits; it is refused by a try, waits in line,
// and is not granted while the writer holds the key. Mutation:
// writer_before always false (the reader joins the first holder, and
// never stands in the line).
func TestAWriterIsNotStarvedByReaders(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			ctx := ctxT(t, 60*time.Second)
			const k = "ws:k"
			opt := slotlock.Options{TTL: 30 * time.Second, PerSlot: m.perSlot}
			r0, err := e.ownLocker(opt).Acquire(ctx, slotlock.Request{Shared: []string{k}})
			require.NoError(t, err)

			type grant struct {
				l   *slotlock.Lease
				err error
			}
			wg := make(chan grant, 1)
			go func() {
				l, err := e.ownLocker(opt).Lock(ctx, k)
				wg <- grant{l, err}
			}()
			require.Eventually(t, func() bool { return e.queueLen(ctx, k) == 1 }, 10*time.Second, time.Millisecond,
				"the writer stands in k's line")

			_, err = e.ownLocker(opt).Acquire(ctx, slotlock.Request{Shared: []string{k}})
			require.ErrorIs(t, err, slotlock.ErrNotAcquired, "a new reader passed the waiting writer")
			rg := make(chan grant, 1)
			go func() {
				l, err := e.ownLocker(opt).Acquire(ctx, slotlock.Request{Shared: []string{k}, Wait: slotlock.WaitForever})
				rg <- grant{l, err}
			}()
			require.Eventually(t, func() bool { return e.queueLen(ctx, k) == 2 }, 10*time.Second, time.Millisecond,
				"the reader stands in k's line behind the writer")

			require.NoError(t, r0.Release(ctx)) // k goes to the writer
			g := <-wg
			require.NoError(t, g.err)
			select {
			case r := <-rg:
				t.Fatalf("the reader was granted while the writer held k: %v", r.err)
			default:
			}
			require.NoError(t, g.l.Release(ctx)) // then to the reader
			r := <-rg
			require.NoError(t, r.err)
			require.NoError(t, r.l.Release(ctx))
			require.Empty(t, e.lockKeys())
		})
	}
}

// attemptCounter is an Observer that keeps the attempts of the last
// acquisition.
type attemptCounter struct {
	nopObserver
	mu       sync.Mutex
	attempts int
}

func (a *attemptCounter) Acquired(ev slotlock.AcquireEvent) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.attempts = ev.Attempts
}

// TestAReentrantReaderWaitsForItsOwnersWriteHold: a lease of an owner
// that asks shared for a key the owner holds exclusively through another
// lease waits for it (there is no downgrade) and sends no confirm while
// it waits: the key is not its. Its Wait runs out; one attempt was sent,
// the first. Mutation: reserve.lua's owner branch taken for readers too
// (the key then counts as the reader's, every confirm fails and is sent
// again at once: thousands of attempts).
func TestAReentrantReaderWaitsForItsOwnersWriteHold(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			ctx := ctxT(t, 60*time.Second)
			const k = "ro:k"
			obs := &attemptCounter{}
			l := e.ownLocker(slotlock.Options{TTL: 30 * time.Second, PerSlot: m.perSlot, Observer: obs})
			oc := slotlock.WithOwner(ctx, "o")
			w, err := l.Lock(oc, k)
			require.NoError(t, err)

			_, err = l.Acquire(oc, slotlock.Request{Shared: []string{k}, Wait: 500 * time.Millisecond})
			require.ErrorIs(t, err, slotlock.ErrNotAcquired)
			obs.mu.Lock()
			require.Equal(t, 1, obs.attempts, "attempts while the owner held k exclusively")
			obs.mu.Unlock()
			require.NoError(t, w.Release(ctx))
			require.Empty(t, e.lockKeys())
		})
	}
}
