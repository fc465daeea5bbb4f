// Package slotlock locks many Redis keys at once on Redis Cluster, all or
// nothing, with one pipelined round trip per node.
//
// It is the public facade: a Locker built on a rueidis client hands out
// Leases. The machinery lives in packages with one job each: slot (hash-slot
// math, no I/O), batch (the per-node check-then-write scripts), reentrant
// (hold counts per owner), pipeline (the script-free fallback).
package slotlock
