//go:build !linux

package redistest

import (
	"context"
	"syscall"
)

// nodeSysProcAttr puts a node in its own process group. Outside Linux there
// is no Pdeathsig: a test binary that dies without Close leaves its nodes.
func nodeSysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

// waitStopped cannot observe the stop without /proc; signals to a local
// process are delivered promptly enough for tests.
func waitStopped(context.Context, int, bool) error { return nil }
