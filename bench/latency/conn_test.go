package latency

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"
)

// echoServer accepts loopback connections and sends back what it reads.
func echoServer(tb testing.TB) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	return ln.Addr().String()
}

func dial(tb testing.TB, rtt time.Duration) net.Conn {
	tb.Helper()
	c, err := Dialer{RTT: rtt}.DialContext(context.Background(), "tcp", echoServer(tb))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close() })
	return c
}

// TestOrderKept writes 12 MB of numbered records in writes of mixed sizes,
// back to back, and wants the same byte stream back.
func TestOrderKept(t *testing.T) {
	c := dial(t, 500*time.Microsecond)
	var want []byte
	for i := range 3000 {
		chunk := make([]byte, 4+(i*7919)%(8<<10))
		binary.BigEndian.PutUint32(chunk, uint32(i))
		for j := 4; j < len(chunk); j++ {
			chunk[j] = byte(i + j)
		}
		want = append(want, chunk...)
	}
	werr := make(chan error, 1)
	go func() {
		for off := 0; off < len(want); {
			// Writes of 4 bytes to 90 KiB: some exceed the recycled
			// buffer size, most cut a record in two.
			n := 4 + (off*31)%(90<<10)
			n = min(n, len(want)-off)
			if _, err := c.Write(want[off : off+n]); err != nil {
				werr <- err
				return
			}
			off += n
		}
		werr <- nil
	}()
	got := make([]byte, len(want))
	c.SetReadDeadline(time.Now().Add(time.Minute))
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatal(err)
	}
	if err := <-werr; err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		n := 0
		for n < min(len(got), len(want)) && got[n] == want[n] {
			n++
		}
		t.Fatalf("got %d bytes, want %d; first difference at byte %d", len(got), len(want), n)
	}
}

// TestDelayAtLeastRTT: a round trip through the layer never takes less
// than the asked RTT minus the clock's lead in each direction (a timerfd
// never fires early, so this cannot flake).
func TestDelayAtLeastRTT(t *testing.T) {
	for _, rtt := range []time.Duration{200 * time.Microsecond, time.Millisecond, 5 * time.Millisecond} {
		c := dial(t, rtt)
		buf := make([]byte, 16)
		for i := range 30 {
			t0 := time.Now()
			if _, err := c.Write([]byte("ping")); err != nil {
				t.Fatal(err)
			}
			if _, err := io.ReadFull(c, buf[:4]); err != nil {
				t.Fatal(err)
			}
			if took := time.Since(t0); took < rtt-2*Lead() {
				t.Fatalf("rtt %v: round trip %d took %v (the clock's lead is %v)", rtt, i, took, Lead())
			}
		}
	}
}

// TestChunksNotSerialised writes 100 chunks back to back behind a 50 ms
// round trip. Delayed one after the other they would take 5 s (each
// waiting out its own 25 ms after the previous one's); in flight together
// they all arrive about 50 ms after the first was written. The bound is
// 1 s, twenty times the expected time, so that a loaded machine does not
// fail the test; serialisation would exceed it fivefold.
func TestChunksNotSerialised(t *testing.T) {
	const rtt, n = 50 * time.Millisecond, 100
	c := dial(t, rtt)
	t0 := time.Now()
	for i := range n {
		if _, err := c.Write([]byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
		// Separate chunks on the wire too, not one coalesced write.
		time.Sleep(50 * time.Microsecond)
	}
	buf := make([]byte, n)
	if _, err := io.ReadFull(c, buf); err != nil {
		t.Fatal(err)
	}
	took := time.Since(t0)
	for i, b := range buf {
		if b != byte(i) {
			t.Fatalf("byte %d is %d", i, b)
		}
	}
	if took < rtt || took > time.Second {
		t.Fatalf("%d chunks took %v to come back, want at least %v and far less than %v", n, took, rtt, n*rtt)
	}
}

func TestReadDeadline(t *testing.T) {
	c := dial(t, 40*time.Millisecond)
	buf := make([]byte, 8)
	// Nothing to read.
	c.SetReadDeadline(time.Now().Add(5 * time.Millisecond))
	if _, err := c.Read(buf); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Read with nothing in flight = %v, want a deadline error", err)
	}
	// Bytes in flight, but due after the deadline.
	if _, err := c.Write([]byte("late")); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Millisecond))
	if _, err := c.Read(buf); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Read of bytes due after the deadline = %v, want a deadline error", err)
	}
	// Deadline lifted: the bytes arrive, in order.
	c.SetReadDeadline(time.Time{})
	if _, err := io.ReadFull(c, buf[:4]); err != nil || string(buf[:4]) != "late" {
		t.Fatalf("Read = %q, %v", buf[:4], err)
	}
	// A deadline set while Read waits ends the wait.
	go func() {
		time.Sleep(10 * time.Millisecond)
		c.SetReadDeadline(time.Now())
	}()
	if _, err := c.Read(buf); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Read after a deadline set meanwhile = %v", err)
	}
}

func TestCloseEndsRead(t *testing.T) {
	c := dial(t, time.Millisecond)
	errc := make(chan error, 1)
	go func() {
		_, err := c.Read(make([]byte, 1))
		errc <- err
	}()
	time.Sleep(10 * time.Millisecond)
	c.Close()
	select {
	case err := <-errc:
		if err == nil {
			t.Fatal("Read after Close returned no error")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Read still blocked 10 s after Close")
	}
	if _, err := c.Write([]byte("x")); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Write after Close = %v, want net.ErrClosed", err)
	}
}

// TestNoSocketAccess: a client that reads the socket itself (go-redis
// peeks at idle connections through syscall.Conn) would see bytes before
// they are due, so the wrapper must not expose it.
func TestNoSocketAccess(t *testing.T) {
	c := dial(t, time.Millisecond)
	if _, ok := c.(syscall.Conn); ok {
		t.Fatal("the delayed connection exposes its socket (syscall.Conn)")
	}
	if plain := dial(t, 0); plain.(*net.TCPConn) == nil {
		t.Fatal("RTT 0 did not dial a plain connection")
	}
}

// BenchmarkRoundTrip measures what a round trip through the layer really
// costs: one PING-sized write and its echo, a 1,000-command pipeline
// flushed as one write (as a client flushes its buffer), and the same
// pipeline as 1,000 separate writes (the layer's worst case: one due time
// per chunk). The rtt-us metric is the measured round trip; compare it
// with the asked-for RTT in the name, and with rtt=0s (plain loopback)
// for the floor.
func BenchmarkRoundTrip(b *testing.B) {
	msg := []byte("*1\r\n$4\r\nPING\r\n")
	for _, rtt := range []time.Duration{0, 200 * time.Microsecond, time.Millisecond} {
		for _, tc := range []struct {
			name          string
			writes, perWr int
		}{{"ping", 1, 1}, {"pipeline=1000", 1, 1000}, {"writes=1000", 1000, 1}} {
			b.Run("rtt="+rtt.String()+"/"+tc.name, func(b *testing.B) {
				c := dial(b, rtt)
				out := bytes.Repeat(msg, tc.perWr)
				buf := make([]byte, len(out)*tc.writes)
				for b.Loop() {
					for range tc.writes {
						if _, err := c.Write(out); err != nil {
							b.Fatal(err)
						}
					}
					if _, err := io.ReadFull(c, buf); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "rtt-us")
			})
		}
	}
}
