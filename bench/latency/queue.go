package latency

import (
	"sync"
	"time"
)

// chunk is bytes in flight: written (or received) at some moment and due
// half a round trip later.
type chunk struct {
	due time.Time
	b   []byte
	s   *slab
}

// slab holds the bytes of consecutive chunks. Chunks are carved from the
// current slab one after the other, and a slab is reused once its last
// chunk is consumed, so that the layer adds no allocations to the
// benchmarks it sits under (testing.B counts the whole process's) and a
// burst of small chunks does not cost a buffer each. (A 64 KiB buffer per
// chunk read was the first design: 1,000 small echoes came back as
// hundreds of chunks and 1,000 one-command writes through a 1 ms round
// trip took 12 ms instead of about 2, mostly in the garbage collector.)
type slab struct {
	b       []byte
	used    int  // bytes handed out to chunks
	refs    int  // chunks not yet consumed
	retired bool // no longer the producer's current slab
}

const (
	slabSize = 64 << 10
	// minRead is the least free space the receiving goroutine reads into;
	// below that it starts a new slab.
	minRead = 8 << 10
	// keptSlabs bounds the free list of each direction.
	keptSlabs = 8
)

// queue is one direction's bytes in flight, in order. Each chunk carries
// its own due time, so a consumer waits for the head only: a chunk behind
// it is already on its way and is due no later than RTT/2 after it was
// queued, whatever the chunks before it cost.
//
// One producer (under the Conn's write lock, or its receiving goroutine)
// and one consumer (under the Conn's read lock, or its sending goroutine).
type queue struct {
	mu    sync.Mutex
	items []chunk
	head  int
	off   int   // bytes of items[head] already consumed
	err   error // set when the producer is done; seen once the queue is empty
	// ready has room for one signal: a push after the consumer found the
	// queue empty wakes it.
	ready chan struct{}
	cur   *slab
	free  []*slab
}

func newQueue() *queue { return &queue{ready: make(chan struct{}, 1)} }

// reserve returns free space of at least n bytes at the end of the current
// slab, for the producer to fill and commit.
func (q *queue) reserve(n int) []byte {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.cur == nil || len(q.cur.b)-q.cur.used < n {
		if q.cur != nil {
			q.cur.retired = true
			q.reuse(q.cur)
		}
		q.cur = q.newSlab(n)
	}
	return q.cur.b[q.cur.used:]
}

func (q *queue) newSlab(n int) *slab {
	if n <= slabSize {
		if k := len(q.free); k > 0 {
			s := q.free[k-1]
			q.free = q.free[:k-1]
			return s
		}
		n = slabSize
	}
	return &slab{b: make([]byte, n)}
}

// reuse puts a retired slab whose chunks are all consumed on the free
// list; called with mu held.
func (q *queue) reuse(s *slab) {
	if !s.retired || s.refs > 0 || len(s.b) != slabSize || len(q.free) >= keptSlabs {
		return
	}
	*s = slab{b: s.b}
	q.free = append(q.free, s)
}

// commit queues the first n bytes of the space reserve returned, due at
// due.
func (q *queue) commit(n int, due time.Time) {
	q.mu.Lock()
	s := q.cur
	q.items = append(q.items, chunk{due: due, b: s.b[s.used : s.used+n : s.used+n], s: s})
	s.used += n
	s.refs++
	q.mu.Unlock()
	q.signal()
}

func (q *queue) signal() {
	select {
	case q.ready <- struct{}{}:
	default:
	}
}

// finish records the producer's last word (io.EOF, a network error); the
// consumer sees it after the chunks already queued.
func (q *queue) finish(err error) {
	q.mu.Lock()
	if q.err == nil {
		q.err = err
	}
	q.mu.Unlock()
	q.signal()
}

// failed returns the producer's error, if it is done.
func (q *queue) failed() error {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.err
}

// peek returns the head chunk's due time without removing it; ok is false
// when the queue is empty, err is the producer's error once it is empty
// and done.
func (q *queue) peek() (due time.Time, ok bool, err error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.head < len(q.items) {
		return q.items[q.head].due, true, nil
	}
	return time.Time{}, false, q.err
}

// take copies into p the bytes of every chunk due at now, in order.
func (q *queue) take(p []byte, now time.Time) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	n := 0
	for n < len(p) && q.head < len(q.items) && !q.items[q.head].due.After(now) {
		c := &q.items[q.head]
		k := copy(p[n:], c.b[q.off:])
		n += k
		q.off += k
		if q.off == len(c.b) {
			q.consumed(c)
			q.head++
			q.off = 0
		}
	}
	q.compact()
	return n
}

// popDue removes every chunk due at now and appends it to out; the caller
// hands them back with done once their bytes are sent.
func (q *queue) popDue(out []chunk, now time.Time) []chunk {
	q.mu.Lock()
	defer q.mu.Unlock()
	for q.head < len(q.items) && !q.items[q.head].due.After(now) {
		out = append(out, q.items[q.head])
		q.items[q.head] = chunk{}
		q.head++
	}
	q.compact()
	return out
}

// done releases chunks taken with popDue.
func (q *queue) done(cs []chunk) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for i := range cs {
		q.consumed(&cs[i])
	}
}

// consumed drops a chunk's hold on its slab and clears it; called with mu
// held.
func (q *queue) consumed(c *chunk) {
	c.s.refs--
	q.reuse(c.s)
	*c = chunk{}
}

// compact reuses the slice once everything queued has been consumed;
// called with mu held.
func (q *queue) compact() {
	if q.head == len(q.items) {
		q.items, q.head = q.items[:0], 0
	}
}
