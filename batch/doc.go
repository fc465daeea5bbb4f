// Package batch is the lock engine: it acquires, extends and releases a set of
// lock keys with one check-then-write Lua script per node (or per slot where
// the server refuses cross-slot scripts), pipelined, nodes in parallel.
//
// It knows nothing of leases, owners or waiting policy; it executes one
// attempt and reports, per key, what happened.
package batch
