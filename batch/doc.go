// Package batch is the root package's Lua engine: it acquires, extends and
// releases lock keys with one check-then-write script per node (or per
// slot where the server refuses cross-slot scripts), pipelined, nodes in
// parallel, and wakes waiters through sharded pub/sub. Users import the
// root package, github.com/slotlock/slotlock, which runs this engine.
//
// It makes attempts and reports, per key, what happened; the acquisition
// protocol that drives it (what to keep, give back, wait for) is
// internal/protocol's. New and the Engine's methods take internal types
// because the methods implement protocol.Strategy, protocol.Queuer and the
// root package's interface of an engine (ExtendMany), which Go satisfies
// across packages only with exported methods, and the root package calls
// the rest (Guard, PerSlot, Close); no one outside this module can build
// their arguments. BareMax is exported for the benchmark report (module
// bench), which quotes it, and MaxCallKeys for the root package's tests,
// which lock more keys than one call carries.
//
// Files by concern: engine.go (the Engine and its per-node state), plan.go
// (keys to calls), exec.go (calls to nodes), acquire.go and bare.go
// (attempts), owner.go (release and extend), reply.go (the scripts'
// replies), reserve.go (waiting), guard.go (guarded writes), scripts.go and
// scripts/ (the Lua).
package batch
