// Package clustertest holds the fault suite: integration tests that crash,
// pause, fail over and reshard a real Redis Cluster while workers lock
// overlapping batches, and check the recorded history for violations.
//
// Each scenario starts a private 3+3 cluster (internal/redistest), so a fault
// never leaks into the next one. Every grant and every end of a lease is
// stamped on one monotonic clock and checked per key and per permit
// resource with porcupine: no exclusive hold of a key overlaps another hold
// of it (shared holds may overlap each other), no resource has more units
// held than its limit, fencing tokens grow in grant order. A scenario
// prints one "chaos report" line: grants, faults, violations, and the windows
// it measured where slotlock claims no safety.
//
// `go test ./...` runs the short form. SLOTLOCK_CHAOS=long (make chaos) runs
// it at length; SLOTLOCK_CHAOS_REPORT names a file for one JSON line per
// scenario. Beside the scenarios sit the regression tests of the library
// bugs the suite found. docs/faults.md describes both and the measured
// table.
package clustertest
