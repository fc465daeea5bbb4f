package redistest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strconv"
	"syscall"
	"time"
)

// nodeSysProcAttr makes a node die with the test binary: Pdeathsig sends it
// SIGKILL when its parent goes (a panicking test, `go test -timeout`, ^C),
// and its own process group keeps a terminal's ^C from reaching it before
// Close has run. Pdeathsig fires when the creating OS thread exits; Go never
// retires threads of goroutines that do not lock them, so that is the
// process exit.
func nodeSysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
}

// waitStopped waits until /proc shows the process stopped (state T) or not,
// since a signal to another process is delivered asynchronously and a test
// that pauses a node must find it paused.
func waitStopped(ctx context.Context, pid int, stopped bool) error {
	if pid == 0 {
		return nil
	}
	path := "/proc/" + strconv.Itoa(pid) + "/stat"
	for {
		b, err := os.ReadFile(path)
		if err != nil {
			return nil // no /proc, or the process is gone: nothing to wait for
		}
		// The state follows the command name, which is in parentheses.
		if i := bytes.LastIndexByte(b, ')'); i >= 0 && i+2 < len(b) {
			isStopped := b[i+2] == 'T' || b[i+2] == 't'
			if isStopped == stopped {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("pid %d: stopped=%v not reached: %w", pid, stopped, ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
}
