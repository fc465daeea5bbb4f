package redistest

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Backend names where the Redis nodes run. Tests should not care, but the
// two backends fail differently (a container pause freezes a cgroup, SIGSTOP
// freezes one process), so CI runs the suite on both.
type Backend string

const (
	// BackendDocker runs one container per node with host networking, so the
	// cluster announces 127.0.0.1 exactly as the process backend does.
	BackendDocker Backend = "docker"
	// BackendProcess runs redis-server processes of this machine; it needs no
	// Docker engine and starts in about a second.
	BackendProcess Backend = "process"
	// BackendAuto picks docker when an engine answers within a couple of
	// seconds and processes otherwise; it is what an empty Backend means.
	BackendAuto Backend = "auto"
)

// EnvBackend is the environment variable that chooses the backend when
// Options.Backend is empty, so that `make test-docker` and `make
// test-process` can switch the whole suite without touching any test.
const EnvBackend = "SLOTLOCK_CLUSTER"

// EnvImage names a Redis image for the docker backend. It wins over every
// other choice, so a developer can test against another Redis version.
const EnvImage = "SLOTLOCK_REDIS_IMAGE"

// EnvServer names the server binary both backends run: a path, or a name
// looked up on PATH (valkey-server). The process backend runs it; the
// docker backend builds its scratch image from it (and from the libraries
// it links), so the two test the same binary. Unset, the harness takes
// redis-server from PATH, else Debian's redis-check-rdb under that name.
// Setting it together with SLOTLOCK_REDIS_IMAGE is an error: the two would
// name different servers.
const EnvServer = "SLOTLOCK_REDIS_SERVER"

// Options describes the cluster a test needs. The zero value is the cluster
// the lock library is designed for: 3 masters with 1 replica each.
type Options struct {
	// Backend is where nodes run; empty means the SLOTLOCK_CLUSTER
	// environment variable (docker, process or auto), and auto when unset.
	Backend Backend
	// Masters is the number of slot-owning masters; 0 means 3.
	Masters int
	// Replicas is the number of replicas per master; 0 means 1. Use
	// NoReplicas for a cluster of masters only.
	Replicas int
	// ExtraArgs are appended to every redis-server command line, for tests
	// that need a server setting (e.g. "--maxmemory", "10mb").
	ExtraArgs []string
	// TLS starts every node with TLS only (no plain port), on the client
	// port, the cluster bus and replication, with a CA and certificate
	// made at start with Go's crypto; Cluster.Client and every harness
	// connection use it, Cluster.TLSConfig gives it to other clients.
	TLS bool
}

// NoReplicas in Options.Replicas asks for masters without replicas; a plain
// 0 keeps the default of one replica per master, as zero values should.
const NoReplicas = -1

func (o Options) withDefaults() Options {
	if o.Masters <= 0 {
		o.Masters = 3
	}
	switch {
	case o.Replicas == 0:
		o.Replicas = 1
	case o.Replicas < 0:
		o.Replicas = 0
	}
	return o
}

// backendChoice is a concrete backend and how it was chosen.
type backendChoice struct {
	backend Backend
	// auto: chosen automatically, so a docker failure may fall back to
	// processes.
	auto bool
	// noDocker: why auto did not choose docker, for the error message when
	// processes fail too.
	noDocker error
}

// resolveBackend turns the requested backend (or the environment) into a
// concrete one.
func (o Options) resolveBackend(ctx context.Context) (backendChoice, error) {
	b := o.Backend
	if b == "" {
		b = Backend(strings.ToLower(strings.TrimSpace(os.Getenv(EnvBackend))))
	}
	switch b {
	case BackendDocker, BackendProcess:
		return backendChoice{backend: b}, nil
	case "", BackendAuto:
		if err := dockerAvailable(ctx); err != nil {
			return backendChoice{backend: BackendProcess, auto: true, noDocker: err}, nil
		}
		return backendChoice{backend: BackendDocker, auto: true}, nil
	default:
		return backendChoice{}, fmt.Errorf("redistest: unknown backend %q (from %s or Options.Backend): want docker, process or auto", b, EnvBackend)
	}
}

// underCI reports whether the CI runner set CI, where a missing cluster must
// fail the build instead of skipping tests silently.
func underCI() bool {
	v, err := strconv.ParseBool(os.Getenv("CI"))
	return err == nil && v
}
