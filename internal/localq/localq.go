// Package localq queues the goroutines of one process that want the same
// keys, so that one Redis acquisition serves them in turn instead of every
// waiter polling Redis. It is the first of two levels: a batch's keys are
// taken here, all at once, before they are taken in Redis.
//
// Scheduling: a batch is granted when every key it wants is free here; it
// never holds some keys while it waits for others (so no two waiters can
// deadlock here, whatever their key order). Waiters may be overtaken by
// later batches whose keys are free, except by the oldest waiter: its keys
// are reserved, nobody else is granted them, so it is served as soon as
// their holders leave, and every waiter becomes the oldest in its turn (no
// starvation). Holding a prefix in canonical order, the first design, kept
// FIFO per key but left batches idle behind waiters that could not run yet.
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
	// Shared, when not nil, says per key (indexed as the keys the holder
	// asks for) whether it wants the key shared: shared holders of a key
	// do not exclude each other (Locker.Acquire's readers).
	Shared []bool
}

// sharedAt reports whether h wants its key i shared.
func (h *Holder) sharedAt(i int) bool { return h.Shared != nil && h.Shared[i] }

// want is how a holder asks for one key.
type want uint8

const (
	exclusive     want = iota
	sharedGranted      // shared, beside readers granted in Redis (a wait)
	sharedAny          // shared, beside any readers (a try, which waits for nothing)
)

// wantAt returns how h asks for its key i; try for a TryAcquire.
func (h *Holder) wantAt(i int, try bool) want {
	switch {
	case !h.sharedAt(i):
		return exclusive
	case try:
		return sharedAny
	}
	return sharedGranted
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
	holders []*Holder // one, several of the same Owner, or shared holders
	shared  bool      // the holders hold the key shared
	waiters []*waiter // waiting for this key (among others), in no order
	// reserved: the oldest waiter wants this key; nobody else is granted it.
	reserved bool
	one      [1]*Holder // holders' first backing array: no second allocation
}

type waiter struct {
	h          *Holder
	keys       []string
	prev, next *waiter       // arrival order
	touched    uint64        // the sweep in which one of its keys came free
	ready      chan struct{} // closed when every key is granted
}

// Table is the per-process queue of keys. The zero value is not usable; use
// New.
type Table struct {
	mu sync.Mutex
	m  map[string]*entry
	// head and tail: waiters in arrival order; head, the oldest, reserves
	// its keys.
	head, tail *waiter
	sweep      uint64
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

// Conflict names a key held here by another holder.
type Conflict struct {
	Index int           // into the keys passed in
	TTL   time.Duration // until the holder's deadline; -1 if unknown
}

// freeFor says whether h may be granted the key of e now, asked for as
// m: nobody holds it but h's own owner, shared holders when h wants it
// shared (granted in Redis, unless h only tries), or holders whose
// deadline passed (taken over), and the oldest
// waiter (unless that is w itself) has not reserved it: a reader does not
// pass the oldest waiter. A key h's owner holds is admitted even when
// reserved: the reserving waiter waits for that owner anyway, and refusing
// the owner's nested lease of a key it holds would deadlock it.
func freeFor(e *entry, h *Holder, m want, w *waiter, head *waiter, now time.Time) bool {
	if e == nil {
		return true
	}
	if len(e.holders) > 0 {
		if h.Owner != "" && e.holders[0].Owner == h.Owner {
			return true
		}
		if !(m != exclusive && e.shared && (m == sharedAny || allGranted(e))) && !allExpired(e, now) {
			return false
		}
	}
	return !e.reserved || (w != nil && w == head)
}

// allGranted reports whether every holder of e is granted in Redis (its
// deadline is known). A reader joins only granted readers: while the
// first is still acquiring (it may be waiting in Redis behind a writer
// of another process, which turns new readers away), the others wait
// here for it, as for a writer, instead of each waiting in Redis. Its
// grant wakes them (Granted).
func allGranted(e *entry) bool {
	for _, x := range e.holders {
		if x.deadline.Load() == 0 {
			return false
		}
	}
	return true
}

// Granted tells the table that h, which holds keys here, is granted in
// Redis: readers waiting for a key it holds shared may join it now.
func (t *Table) Granted(keys []string, h *Holder) {
	if h.Shared == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.sweep++
	found := false
	for i, k := range keys {
		if e := t.m[k]; e != nil && h.sharedAt(i) && len(e.waiters) > 0 {
			t.touch(e)
			found = true
		}
	}
	if found {
		t.run(false)
	}
}

// allExpired reports whether every holder of e has run out of lease.
func allExpired(e *entry, now time.Time) bool {
	for _, x := range e.holders {
		if exp, _ := x.expired(now); !exp {
			return false
		}
	}
	return true
}

// TryAcquire takes every key for h, or none: it returns the keys held by
// others (or reserved for the oldest waiter) when any is. No waiting.
func (t *Table) TryAcquire(keys []string, h *Holder) []Conflict {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := time.Now()
	if t.grantFree(keys, h, now, true) {
		return nil
	}
	var out []Conflict // not empty: the same check at the same now failed
	for i, k := range keys {
		if e := t.m[k]; !freeFor(e, h, h.wantAt(i, true), nil, t.head, now) {
			out = append(out, Conflict{Index: i, TTL: ttlOf(e, now)})
		}
	}
	return out
}

func ttlOf(e *entry, now time.Time) time.Duration {
	if len(e.holders) == 0 {
		return -1
	}
	if _, left := e.holders[0].expired(now); left > 0 {
		return left
	}
	return -1
}

// allFree says whether every key is free for h (freeFor), w being h's
// waiter if it waits.
func (t *Table) allFree(keys []string, h *Holder, w *waiter, now time.Time, try bool) bool {
	for i, k := range keys {
		if !freeFor(t.m[k], h, h.wantAt(i, try), w, t.head, now) {
			return false
		}
	}
	return true
}

// grantFree makes h a holder of every key if all are free for it now
// (freeFor), and reports whether it did. It is allFree then takeAll with
// one map lookup per key fewer: the entries found by the check are kept
// (up to grantBuf keys) for the grant, which is all an uncontended batch
// does here; t.mu is held.
func (t *Table) grantFree(keys []string, h *Holder, now time.Time, try bool) bool {
	if len(keys) > grantBuf {
		if !t.allFree(keys, h, nil, now, try) {
			return false
		}
		t.takeAll(keys, h, now)
		return true
	}
	var buf [grantBuf]*entry
	found := buf[:len(keys)]
	for i, k := range keys {
		e := t.m[k]
		if !freeFor(e, h, h.wantAt(i, try), nil, t.head, now) {
			return false
		}
		found[i] = e
	}
	for i, k := range keys {
		e := found[i]
		if e == nil {
			e = t.entryFor(k)
		}
		t.hold(e, h, h.sharedAt(i), now)
	}
	return true
}

// grantBuf is how many keys grantFree keeps the entries of on the stack.
const grantBuf = 256

// hold makes h a holder of e (sh: shared), beside its owner's leases or
// other shared holders, or alone; the caller checked that it may
// (freeFor).
func (t *Table) hold(e *entry, h *Holder, sh bool, now time.Time) {
	if len(e.holders) > 0 && (h.Owner != "" && e.holders[0].Owner == h.Owner ||
		sh && e.shared && !allExpired(e, now)) {
		e.holders = append(e.holders, h)
	} else { // free, or expired holders taken over
		clear(e.holders)
		e.one[0] = h
		e.holders = e.one[:1]
		e.shared = sh
	}
}

// takeAll makes h a holder of every key; the caller checked that it may
// (freeFor).
func (t *Table) takeAll(keys []string, h *Holder, now time.Time) {
	for i, k := range keys {
		t.hold(t.entryFor(k), h, h.sharedAt(i), now)
	}
}

// entryFor returns k's entry, creating an empty one.
func (t *Table) entryFor(k string) *entry {
	e := t.m[k]
	if e == nil {
		if n := len(t.free); n > 0 {
			e = t.free[n-1]
			t.free = t.free[:n-1]
		} else {
			e = &entry{}
		}
		t.m[k] = e
	}
	return e
}

// Acquire takes every key for h at once, waiting until all are free here.
// On error (ctx done) it holds nothing and returns context.Cause(ctx).
func (t *Table) Acquire(ctx context.Context, keys []string, h *Holder) error {
	t.mu.Lock()
	if t.grantFree(keys, h, time.Now(), false) {
		t.mu.Unlock()
		return nil
	}
	w := &waiter{h: h, keys: keys, ready: make(chan struct{})}
	for _, k := range keys {
		e := t.entryFor(k)
		e.waiters = append(e.waiters, w)
	}
	w.prev = t.tail
	if t.tail != nil {
		t.tail.next = w
	} else {
		t.head = w
		t.reserve(w)
	}
	t.tail = w
	t.mu.Unlock()

	timer := time.NewTimer(recheck)
	defer timer.Stop()
	for {
		select {
		case <-w.ready:
			return nil
		case <-timer.C:
			timer.Reset(t.takeOverExpired(w))
		case <-ctx.Done():
			t.mu.Lock()
			select {
			case <-w.ready:
				// Granted just now: give it back.
				t.releaseLocked(keys, h)
			default:
				t.leave(w)
				t.run(true)
			}
			t.mu.Unlock()
			return context.Cause(ctx)
		}
	}
}

// recheck is how often a waiter looks again at holders whose deadline is
// not known yet (still acquiring in Redis). It reads local memory only;
// Redis is not polled.
const recheck = 250 * time.Millisecond

// takeOverExpired lets w's wait end when a holder of one of its keys ran
// out of lease without a release (lost, or its owner forgot it), and says
// when to look again.
func (t *Table) takeOverExpired(w *waiter) time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := time.Now()
	next := recheck
	found := false
	for _, k := range w.keys {
		e := t.m[k]
		if e == nil || len(e.holders) == 0 {
			continue
		}
		exp, left := e.holders[0].expired(now)
		switch {
		case exp:
			if !found {
				t.sweep++
				found = true
			}
			t.touch(e)
		case left > 0 && left < next:
			next = left
		}
	}
	if found {
		t.run(false)
	}
	return next
}

// reserve marks w's keys as reserved for it (leave unmarks them).
func (t *Table) reserve(w *waiter) {
	for _, k := range w.keys {
		t.m[k].reserved = true
	}
}

func (t *Table) touch(e *entry) {
	for _, w := range e.waiters {
		w.touched = t.sweep
	}
}

// leave takes w out of the queue (granted or cancelled); the next oldest
// waiter then reserves its keys.
func (t *Table) leave(w *waiter) {
	for _, k := range w.keys {
		e := t.m[k]
		for i, x := range e.waiters {
			if x == w {
				last := len(e.waiters) - 1
				e.waiters[i] = e.waiters[last]
				e.waiters[last] = nil
				e.waiters = e.waiters[:last]
				break
			}
		}
		if w == t.head {
			e.reserved = false
		}
		t.forgetIfUnused(k, e)
	}
	if w.prev != nil {
		w.prev.next = w.next
	} else {
		t.head = w.next
		if t.head != nil {
			t.reserve(t.head)
		}
	}
	if w.next != nil {
		w.next.prev = w.prev
	} else {
		t.tail = w.prev
	}
	w.prev, w.next = nil, nil
}

// run grants every waiter that can be granted, oldest first: all waiters
// when all is set (the reservations changed), else those whose keys came
// free in the current sweep.
func (t *Table) run(all bool) {
	now := time.Now()
	for w := t.head; w != nil; {
		next := w.next
		if (all || w.touched == t.sweep) && t.allFree(w.keys, w.h, w, now, false) {
			t.takeAll(w.keys, w.h, now)
			t.leave(w)
			close(w.ready)
		}
		w = next
	}
}

func (t *Table) forgetIfUnused(k string, e *entry) {
	if len(e.holders) > 0 || len(e.waiters) > 0 {
		return
	}
	delete(t.m, k)
	t.recycle(e)
}

// recycle keeps a forgotten entry for reuse. A key is forgotten only when
// nobody holds it and nobody waits for it; waiters look their keys up by
// name under the table's lock, never through a kept pointer, so a reused
// entry cannot be mistaken for another key's. Entries with waiter capacity
// (contended keys) go to the collector, which keeps the free list to
// uncontended keys.
func (t *Table) recycle(e *entry) {
	if cap(e.waiters) > 0 || len(t.free) >= maxFree {
		return
	}
	e.holders, e.one[0], e.reserved, e.shared = nil, nil, false, false
	t.free = append(t.free, e)
}

// Release gives back the keys h holds, in any order, and grants the waiters
// that can now run. Keys h no longer holds (taken over) are left alone.
func (t *Table) Release(keys []string, h *Holder) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.releaseLocked(keys, h)
}

func (t *Table) releaseLocked(keys []string, h *Holder) {
	t.sweep++
	freed := false
	for _, k := range keys {
		e := t.m[k]
		if e == nil {
			continue
		}
		left := false
		for i, x := range e.holders {
			if x == h {
				e.holders = append(e.holders[:i], e.holders[i+1:]...)
				left = true
				break
			}
		}
		// A key still held shared may have come free for a waiting
		// reader too: the holder that left may have been the one not yet
		// granted in Redis (allGranted).
		if len(e.waiters) > 0 && (len(e.holders) == 0 || left && e.shared) {
			t.touch(e)
			freed = true
		} else {
			t.forgetIfUnused(k, e)
		}
	}
	if freed {
		t.run(false)
	}
}
