// Package bench measures slotlock against what users would otherwise pick to
// lock many keys at once on Redis Cluster: one SET NX per key by hand,
// redsync, rueidislock, bsm/redislock, and a pipeline with no safety at all
// as the ceiling (with an owner-checked release, the checked pipeline of
// Probes, the ceiling of any lock that deletes only its own keys).
//
// Every contender runs against the same real cluster (3 masters, 3
// replicas, started by internal/redistest) in the same matrix of cells:
// batch size K, workers W, keys drawn without repetition from 1,000,000
// (uncontended) or from 200 hot keys (contended). A cell is a standard
// testing.B benchmark, so `go test -bench` and benchstat work as usual;
// cmd/slotbench runs the whole matrix and writes docs/benchmarks.md.
//
// Speed means nothing if the lock does not hold, so every contender proves
// it held its keys: before timing, a pass reads every lock key back with
// one pipelined GET and compares it with the acquirer's token; during
// timing, an in-process table catches two workers holding one key at once,
// and every release goes through the library's own owner check. Any
// violation fails the cell.
//
// This module is separate from the library's so that the peers never enter
// the library's go.mod.
package bench
