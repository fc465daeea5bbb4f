//go:build !linux

package clustertest

import "time"

// sysMonotonic falls back to the wall clock where CLOCK_MONOTONIC is not at
// hand: still shared by the processes of one machine, but it can step.
func sysMonotonic() int64 { return time.Now().UnixNano() }
