// Package redistest starts and controls a real Redis Cluster (3 masters and 3
// replicas on 127.0.0.1) for tests and benchmarks, from containers or from
// redis-server processes.
//
// Lock semantics only show against a real cluster: MOVED and ASK during
// resharding, writes lost in a failover, a paused master that still thinks
// it owns its slots. The harness makes those faults one call each (Kill,
// Restart, Pause, Resume, Failover, MoveSlot) and WaitReady says when the
// cluster has settled again, so tests assert on outcomes instead of sleeping.
//
// # Backends
//
// BackendProcess runs redis-server from PATH or, on Debian, a copy of
// redis-check-rdb named redis-server (the same binary; it picks its mode
// from its name). BackendDocker runs one container per node with host
// networking, from $SLOTLOCK_REDIS_IMAGE, a local redis:7, or an image
// built FROM scratch out of the host's Redis binaries (no registry needed).
// SLOTLOCK_CLUSTER=docker|process|auto picks one for a whole test run; auto
// takes docker when an engine answers within two seconds.
//
// SLOTLOCK_REDIS_SERVER=valkey-server (a name on PATH, or a path) makes
// both backends run that binary instead: the process backend directly, the
// docker backend from a scratch image built from it. Every run prints the
// server as it names itself (INFO server), e.g. "valkey 8.0.1", on its first
// line (Main; shown by go test -v and for a failing package), and
// Cluster.Server and Cluster.HasCommand let a test state which server it
// ran on and skip, as NOT RUN, a test of a command the server lacks.
//
// Every test binary of `go test ./...` starts its own cluster at the same
// time, so ports come from 20000-32000 (below the kernel's ephemeral range)
// under per-port file locks, nodes die with the test binary (Pdeathsig), and
// containers of crashed runs are removed on the next start.
//
// # Entry points
//
// Main (from TestMain) and Require share one cluster per package;
// StartForTest gives a test its own. Under CI=true a cluster that cannot
// start fails the run; elsewhere the tests skip and say why.
//
// Node.Do talks to exactly one node through a single-node rueidis client.
// INFO and CLUSTER INFO replies come back as RESP3 verbatim strings with a
// "txt:" prefix there; Node.Info strips it.
package redistest
