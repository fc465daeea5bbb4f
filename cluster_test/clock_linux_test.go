//go:build linux

package clustertest

import (
	"syscall"
	"unsafe"
)

// sysMonotonic reads CLOCK_MONOTONIC, the clock every process of the machine
// shares. Go's own monotonic readings count from each process's start, so
// they cannot compare a holder process's grant with the test's acquisition;
// this one can.
func sysMonotonic() int64 {
	var ts syscall.Timespec
	const clockMonotonic = 1
	if _, _, errno := syscall.Syscall(syscall.SYS_CLOCK_GETTIME, clockMonotonic, uintptr(unsafe.Pointer(&ts)), 0); errno != 0 {
		panic("clock_gettime(CLOCK_MONOTONIC): " + errno.Error())
	}
	return ts.Nano()
}
