//go:build linux

package latency

import (
	"fmt"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// clock sleeps with sub-millisecond precision: a non-blocking timerfd read
// through the runtime's netpoller parks only the calling goroutine, and
// epoll reports the timer's expiry as an fd event, not through its own
// millisecond timeout. One clock serves one goroutine at a time.
type clock struct {
	f   *os.File
	raw syscall.RawConn
	buf [8]byte
	// spec, serr and arm are built once: a closure made per sleep would
	// allocate, and the benchmarks count allocations process-wide.
	spec unix.ItimerSpec
	serr error
	arm  func(fd uintptr)
}

func newClock() (*clock, error) {
	fd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("latency: timerfd_create: %w", err)
	}
	// NewFile registers a non-blocking descriptor with the netpoller.
	f := os.NewFile(uintptr(fd), "timerfd")
	raw, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("latency: timerfd: %w", err)
	}
	c := &clock{f: f, raw: raw}
	c.arm = func(fd uintptr) { c.serr = unix.TimerfdSettime(int(fd), 0, &c.spec, nil) }
	return c, nil
}

// sleep returns after at least d, or with an error once the clock is
// closed.
func (c *clock) sleep(d time.Duration) error {
	// A zero it_value would disarm the timer and the read never return.
	c.spec = unix.ItimerSpec{Value: unix.NsecToTimespec(int64(max(d, time.Microsecond)))}
	// Control holds the descriptor open for the call: after a concurrent
	// close its number may already name another file.
	if err := c.raw.Control(c.arm); err != nil {
		return err
	}
	if c.serr != nil {
		return fmt.Errorf("latency: timerfd_settime: %w", c.serr)
	}
	_, err := c.f.Read(c.buf[:])
	return err
}

func (c *clock) close() error { return c.f.Close() }
