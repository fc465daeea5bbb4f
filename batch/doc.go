// Package batch is the Lua strategy of slotlock, for the root package: it
// acquires, extends and releases lock keys with one check-then-write
// script per node (or per slot where the server refuses cross-slot
// scripts), pipelined, nodes in parallel, and wakes waiters through
// sharded pub/sub.
//
// It makes attempts and reports, per key, what happened; the acquisition
// protocol that drives it (what to keep, give back, wait for) is
// internal/protocol's. Files by concern: engine.go (the Engine and its
// per-node state), plan.go (keys to calls), exec.go (calls to nodes),
// acquire.go and bare.go (attempts), owner.go (release and extend),
// reply.go (the scripts' replies), wake.go (waiting), guard.go (guarded
// writes), scripts.go and scripts/ (the Lua).
package batch
