package latency

import (
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// Conn is a net.Conn whose bytes take RTT/2 longer in each direction.
//
// Write copies the chunk, stamps it due RTT/2 later and returns at once; a
// goroutine of the connection sends chunks at their due times, in order,
// each burst of due chunks in one writev. A second goroutine reads the
// socket as soon as bytes arrive and stamps each chunk due RTT/2 later;
// Read hands out bytes once they are due. Neither direction waits for a
// chunk's delay before starting the next chunk's: what is in flight stays
// in flight.
//
// Read deadlines are honoured (os.ErrDeadlineExceeded, as the clients'
// own timeouts expect); write deadlines are ignored, since Write never
// blocks on the network.
type Conn struct {
	net.Conn
	half    time.Duration
	out, in *queue
	wclock  *clock // the sending goroutine's
	rclock  *clock // Read's, under rmu
	rmu     sync.Mutex
	wmu     sync.Mutex // one producer for out
	stats   *Stats

	readDeadline atomic.Int64 // UnixNano; 0 means none
	deadlineSet  chan struct{}
	dlTimer      *time.Timer // Read's, under rmu

	closed    chan struct{}
	closeOnce sync.Once
	closeErr  error
}

// Stats counts what went through the connections of one Dialer.
type Stats struct {
	// Writes counts the chunks the client wrote (a flush of its buffer:
	// one command, or a pipelined burst).
	Writes atomic.Int64
}

// Wrap puts conn behind an emulated round trip of rtt (half each way).
// The Conn owns conn: closing it closes conn.
func Wrap(conn net.Conn, rtt time.Duration, stats *Stats) (*Conn, error) {
	wc, err := newClock()
	if err != nil {
		return nil, err
	}
	rc, err := newClock()
	if err != nil {
		wc.close()
		return nil, err
	}
	if stats == nil {
		stats = &Stats{}
	}
	c := &Conn{
		Conn: conn, half: rtt / 2, out: newQueue(), in: newQueue(),
		wclock: wc, rclock: rc, stats: stats,
		deadlineSet: make(chan struct{}, 1), closed: make(chan struct{}),
	}
	Lead() // calibrate before the first chunk, not during it
	go c.sendLoop()
	go c.receiveLoop()
	return c, nil
}

// Write queues a copy of p, due RTT/2 from now.
func (c *Conn) Write(p []byte) (int, error) {
	select {
	case <-c.closed:
		return 0, net.ErrClosed
	default:
	}
	if err := c.out.failed(); err != nil {
		return 0, err
	}
	if len(p) == 0 {
		return 0, nil
	}
	c.wmu.Lock()
	copy(c.out.reserve(len(p)), p)
	c.out.commit(len(p), time.Now().Add(c.half))
	c.wmu.Unlock()
	c.stats.Writes.Add(1)
	return len(p), nil
}

// sendLoop sends each chunk at its due time.
func (c *Conn) sendLoop() {
	var (
		due []chunk
		vec [][]byte
		// bufs lives in the heap once, not per send (WriteTo takes its
		// address).
		bufs = new(net.Buffers)
	)
	for {
		at, ok, _ := c.out.peek()
		if !ok {
			select {
			case <-c.out.ready:
				continue
			case <-c.closed:
				return
			}
		}
		if c.wclock.sleepUntil(at) != nil {
			return
		}
		due = c.out.popDue(due[:0], time.Now())
		// WriteTo consumes the slice it is given, elements included.
		vec = vec[:0]
		for _, ch := range due {
			vec = append(vec, ch.b)
		}
		*bufs = vec
		_, err := bufs.WriteTo(c.Conn)
		c.out.done(due)
		if err != nil {
			c.out.finish(err)
			return
		}
	}
}

// receiveLoop stamps what arrives with its due time.
func (c *Conn) receiveLoop() {
	for {
		b := c.in.reserve(minRead)
		n, err := c.Conn.Read(b)
		if n > 0 {
			c.in.commit(n, time.Now().Add(c.half))
		}
		if err != nil {
			c.in.finish(err)
			return
		}
	}
}

// Read returns bytes that are due, waiting for them as long as the read
// deadline allows.
func (c *Conn) Read(p []byte) (int, error) {
	c.rmu.Lock()
	defer c.rmu.Unlock()
	if len(p) == 0 {
		return 0, nil
	}
	for {
		select {
		case <-c.closed:
			return 0, net.ErrClosed
		default:
		}
		var dl time.Time
		if ns := c.readDeadline.Load(); ns != 0 {
			dl = time.Unix(0, ns)
			if !time.Now().Before(dl) {
				return 0, os.ErrDeadlineExceeded
			}
		}
		at, ok, err := c.in.peek()
		switch {
		case ok && !dl.IsZero() && at.After(dl):
			// The bytes would arrive after the deadline.
			if c.rclock.sleepUntil(dl) != nil {
				return 0, net.ErrClosed
			}
		case ok:
			if c.rclock.sleepUntil(at) != nil {
				return 0, net.ErrClosed
			}
			if n := c.in.take(p, time.Now()); n > 0 {
				return n, nil
			}
		case err != nil:
			return 0, err
		default:
			c.awaitData(dl)
		}
	}
}

// awaitData returns when bytes arrive, the connection closes, the read
// deadline changes or passes.
func (c *Conn) awaitData(dl time.Time) {
	var expired <-chan time.Time
	if !dl.IsZero() {
		if c.dlTimer == nil {
			c.dlTimer = time.NewTimer(time.Until(dl))
		} else {
			c.dlTimer.Reset(time.Until(dl))
		}
		defer c.dlTimer.Stop()
		expired = c.dlTimer.C
	}
	select {
	case <-c.in.ready:
	case <-c.closed:
	case <-c.deadlineSet:
	case <-expired:
	}
}

// SetDeadline sets the read deadline; see SetWriteDeadline for writes.
func (c *Conn) SetDeadline(t time.Time) error { return c.SetReadDeadline(t) }

// SetReadDeadline bounds Read, including one already waiting.
func (c *Conn) SetReadDeadline(t time.Time) error {
	var ns int64
	if !t.IsZero() {
		ns = t.UnixNano()
	}
	c.readDeadline.Store(ns)
	select {
	case c.deadlineSet <- struct{}{}:
	default:
	}
	return nil
}

// SetWriteDeadline is accepted and ignored: Write only queues, and the
// sending goroutine must not fail a chunk for a deadline set after it was
// written.
func (c *Conn) SetWriteDeadline(time.Time) error { return nil }

// Close closes the connection; bytes still in flight are dropped, as a
// closed socket drops them.
func (c *Conn) Close() error {
	c.closeOnce.Do(func() {
		close(c.closed)
		c.closeErr = c.Conn.Close()
		c.wclock.close()
		c.rclock.close()
	})
	return c.closeErr
}

var _ net.Conn = (*Conn)(nil)
