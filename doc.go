// Package slotlock locks many Redis keys at once on Redis Cluster, all or
// nothing, with one pipelined round trip per node.
//
// It is the public facade: a Locker built on a rueidis client hands out
// Leases, and users import this package (with slot for key math, quorum
// for locks over several deployments). Its engines are packages of their
// own, one job each, that exist for this package only: batch (the per-node
// check-then-write scripts), pipeline (the script-free fallback) and
// reentrant (hold counts per owner).
package slotlock
