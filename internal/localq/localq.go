// Package localq queues the goroutines of one process that want the same
// keys, so that one Redis acquisition serves them in turn instead of every
// waiter polling Redis. It is the first of two levels: a key is taken here
// (in canonical order, first come first served) before it is taken in Redis.
//
// The table is an optimisation and never the authority: Redis decides who
// holds a key. That is why a waiter may take a key over from a holder whose
// lease has run out by the holder's own deadline: if the holder's Redis lock
// is in fact still alive, the new holder simply meets it in Redis and waits
// there.
package localq

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// Holder is one lease's identity in the table. Its deadline is the
// client-side estimate of when the lease's Redis locks expire; waiters may
// take a key over once it has passed.
type Holder struct {
	deadline atomic.Int64 // unix nanoseconds; 0: not yet known (acquiring)
	// Owner is the reentrancy identity; holders with the same non-empty
	// Owner do not exclude each other here (Redis keeps the hold count).
	Owner string
}

// SetDeadline records when the holder's locks expire, as estimated by the
// client; the zero time means "still acquiring": never taken over.
func (h *Holder) SetDeadline(t time.Time) {
	if t.IsZero() {
		h.deadline.Store(0)
		return
	}
	h.deadline.Store(t.UnixNano())
}

func (h *Holder) expired(now time.Time) (bool, time.Duration) {
	d := h.deadline.Load()
	if d == 0 {
		return false, 0
	}
	left := time.Duration(d - now.UnixNano())
	return left <= 0, left
}

type entry struct {
	holders []*Holder // one, or several of the same Owner
	queue   []*waiter
	one     [1]*Holder // holders' first backing array: no second allocation
}

type waiter struct {
	h     *Holder
	ready chan struct{} // closed when the key is handed over
}

// Table is the per-process queue of keys. The zero value is not usable; use
// New.
type Table struct {
	mu sync.Mutex
	m  map[string]*entry
	// free keeps entries of forgotten keys for reuse: an uncontended batch
	// of K keys would otherwise allocate K entries per lease (a key is
	// forgotten when its last holder leaves and nobody waits).
	free []*entry
}

// maxFree bounds the entries kept for reuse.
const maxFree = 4096

// New returns an empty table.
func New() *Table { return &Table{m: make(map[string]*entry)} }

// Len returns the number of keys held or waited for (for leak tests).
func (t *Table) Len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.m)
}

func (e *entry) admits(h *Holder) bool {
	if len(e.holders) == 0 {
		return len(e.queue) == 0
	}
	return h.Owner != "" && e.holders[0].Owner == h.Owner
}

// Conflict names a key held here by another holder.
type Conflict struct {
	Index int           // into the keys passed in
	TTL   time.Duration // until the holder's deadline; -1 if unknown
}

// TryAcquire takes every key for h, or none: it returns the keys held by
// others when any is. No waiting.
func (t *Table) TryAcquire(keys []string, h *Holder) []Conflict {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := time.Now()
	var out []Conflict
	for i, k := range keys {
		e := t.m[k]
		if e == nil || e.admits(h) {
			continue
		}
		if t.expiredUnqueued(e) {
			continue // taken over below
		}
		out = append(out, Conflict{Index: i, TTL: t.ttlOf(e, now)})
	}
	if out != nil {
		return out
	}
	for _, k := range keys {
		t.take(k, h)
	}
	return nil
}

func (t *Table) ttlOf(e *entry, now time.Time) time.Duration {
	if len(e.holders) == 0 {
		return -1
	}
	if _, left := e.holders[0].expired(now); left > 0 {
		return left
	}
	return -1
}

// take makes h a holder of k; the caller checked that it may: k is free,
// held by h's owner, or held by an expired holder (taken over).
func (t *Table) take(k string, h *Holder) {
	e := t.m[k]
	if e == nil {
		if n := len(t.free); n > 0 {
			e = t.free[n-1]
			t.free = t.free[:n-1]
		} else {
			e = &entry{}
		}
		e.one[0] = h
		e.holders = e.one[:1]
		t.m[k] = e
		return
	}
	if len(e.holders) > 0 && (h.Owner == "" || e.holders[0].Owner != h.Owner) {
		e.holders = e.holders[:0]
	}
	e.holders = append(e.holders, h)
}

// Acquire takes keys for h in the order given (canonical order, which keeps
// waiters from deadlocking), waiting first come first served for keys held
// by others. On error (ctx done) it gives back what it took and returns
// context.Cause(ctx).
func (t *Table) Acquire(ctx context.Context, keys []string, h *Holder) error {
	// Fast path: every key free, one critical section.
	if t.TryAcquire(keys, h) == nil {
		return nil
	}
	for i, k := range keys {
		if err := t.acquireOne(ctx, k, h); err != nil {
			t.Release(keys[:i], h)
			return err
		}
	}
	return nil
}

// recheck is how often the first waiter looks again at a holder whose
// deadline is not known yet (still acquiring in Redis). It reads local
// memory only; Redis is not polled.
const recheck = 250 * time.Millisecond

func (t *Table) acquireOne(ctx context.Context, k string, h *Holder) error {
	t.mu.Lock()
	e := t.m[k]
	switch {
	case t.holds(e, h):
		t.mu.Unlock()
		return nil
	case e == nil || e.admits(h) || t.expiredUnqueued(e):
		t.take(k, h)
		t.mu.Unlock()
		return nil
	}
	w := &waiter{h: h, ready: make(chan struct{})}
	e.queue = append(e.queue, w)
	t.mu.Unlock()

	timer := time.NewTimer(recheck)
	defer timer.Stop()
	for {
		select {
		case <-w.ready:
			return nil
		case <-timer.C:
			timer.Reset(t.takeOverIfExpired(k, e, w))
		case <-ctx.Done():
			t.mu.Lock()
			select {
			case <-w.ready:
				// Handed over just now: pass it on.
				t.releaseLocked(k, h)
			default:
				t.dequeue(e, w)
				t.handOff(k, e)
			}
			t.mu.Unlock()
			return context.Cause(ctx)
		}
	}
}

// takeOverIfExpired lets the first waiter take k over from a holder whose
// lease ran out without a release (lost, or its owner forgot it), and says
// when to look again.
func (t *Table) takeOverIfExpired(k string, e *entry, w *waiter) time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(e.holders) == 0 || len(e.queue) == 0 || e.queue[0] != w {
		return recheck
	}
	exp, left := e.holders[0].expired(time.Now())
	if exp {
		e.holders = e.holders[:0]
		t.handOff(k, e)
		return recheck
	}
	if left > 0 && left < recheck {
		return left
	}
	return recheck
}

func (t *Table) expiredUnqueued(e *entry) bool {
	if len(e.queue) > 0 || len(e.holders) == 0 {
		return false
	}
	exp, _ := e.holders[0].expired(time.Now())
	return exp
}

func (t *Table) holds(e *entry, h *Holder) bool {
	if e == nil {
		return false
	}
	for _, x := range e.holders {
		if x == h {
			return true
		}
	}
	return false
}

func (t *Table) dequeue(e *entry, w *waiter) {
	for i, x := range e.queue {
		if x == w {
			e.queue = append(e.queue[:i], e.queue[i+1:]...)
			return
		}
	}
}

// handOff gives a free key to the first waiter (and to the waiters behind it
// of the same owner), or forgets the key when nobody waits.
func (t *Table) handOff(k string, e *entry) {
	if len(e.holders) > 0 {
		return
	}
	if len(e.queue) == 0 {
		delete(t.m, k)
		t.recycle(e)
		return
	}
	w := e.queue[0]
	e.queue = e.queue[1:]
	e.holders = append(e.holders, w.h)
	close(w.ready)
	for len(e.queue) > 0 && w.h.Owner != "" && e.queue[0].h.Owner == w.h.Owner {
		n := e.queue[0]
		e.queue = e.queue[1:]
		e.holders = append(e.holders, n.h)
		close(n.ready)
	}
}

// recycle keeps a forgotten entry for reuse. A key is forgotten only when
// nobody holds it and nobody waits for it, so no goroutine is left to use
// its entry as that key's; the one that may still read it is a waiter
// that was just handed the key, whose timer fired first:
// takeOverIfExpired then finds itself not first in the queue (of whatever
// key the entry serves by then) and returns without writing. Entries with
// queue capacity (contended keys) go to the collector, which keeps the
// free list to uncontended keys.
func (t *Table) recycle(e *entry) {
	if cap(e.queue) > 0 || len(t.free) >= maxFree {
		return
	}
	e.holders, e.one[0] = nil, nil
	t.free = append(t.free, e)
}

// Release gives back the keys h holds, in any order, and hands each to its
// next waiter. Keys h no longer holds (taken over) are left alone.
func (t *Table) Release(keys []string, h *Holder) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, k := range keys {
		t.releaseLocked(k, h)
	}
}

func (t *Table) releaseLocked(k string, h *Holder) {
	e := t.m[k]
	if e == nil {
		return
	}
	for i, x := range e.holders {
		if x == h {
			e.holders = append(e.holders[:i], e.holders[i+1:]...)
			break
		}
	}
	t.handOff(k, e)
}
