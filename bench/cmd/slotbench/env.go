package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/slotlock/slotlock/bench"
	"github.com/slotlock/slotlock/internal/redistest"
)

// benchBackend is where the harness's nodes run for a benchmark: what
// SLOTLOCK_CLUSTER names, else processes, not the tests' auto (docker when
// an engine answers). Client and nodes share this machine's cores, and the
// docker backend puts all six nodes in one cgroup under the engine's, whose
// CPU weight (cpu.shares 1024 on cgroup v1) is that of ONE runnable thread
// of the benchmark: the more threads and processes a contender runs, the
// less CPU Redis gets, which no deployment with Redis on hosts of its own
// sees. As redis-server processes each node weighs as much as one thread.
// Measured: with
// both backends in alternating runs, 4 x 4 processes at 1 ms made 0.86x
// of 1 x 16 in both docker runs and 0.97-0.99x in both process runs; one
// Locker's own cells moved little.
func benchBackend() redistest.Backend {
	if b := os.Getenv(redistest.EnvBackend); b != "" {
		return redistest.Backend(b)
	}
	return redistest.BackendProcess
}

// openEnv starts the harness's cluster, or attaches to the user's (addrs)
// under prefix. The returned function tears down what openEnv set up: the
// harness's cluster, or every key under the prefix; it may be called more
// than once.
func openEnv(ctx context.Context, addrs, prefix string) (*bench.Env, func(), error) {
	if addrs == "" {
		backend := benchBackend()
		fmt.Printf("slotbench: starting a 3+3 Redis Cluster (backend %s; %s=%s)\n", backend, redistest.EnvBackend, orDefault(os.Getenv(redistest.EnvBackend), "unset"))
		cluster, err := redistest.Start(ctx, redistest.Options{Backend: backend})
		if err != nil {
			return nil, nil, err
		}
		env, err := bench.NewEnv(ctx, cluster)
		if err != nil {
			cluster.Close()
			return nil, nil, err
		}
		return env, sync.OnceFunc(func() {
			env.Close()
			if err := cluster.Close(); err != nil {
				fmt.Fprintln(os.Stderr, "slotbench: close cluster:", err)
			}
		}), nil
	}
	seeds := strings.Split(addrs, ",")
	fmt.Printf("slotbench: attaching to the cluster at %s, keys under %q\n", strings.Join(seeds, ", "), prefix)
	env, err := bench.Attach(ctx, seeds, prefix)
	if err != nil {
		return nil, nil, err
	}
	return env, sync.OnceFunc(func() {
		// The run's context may be over: cleaning up has its own.
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		n, err := env.Cleanup(ctx)
		if err != nil {
			fmt.Fprintf(os.Stderr, "slotbench: cleanup: %v; keys under %q may remain\n", err, prefix)
		} else {
			fmt.Printf("slotbench: deleted %d leftover keys under %q\n", n, prefix)
		}
		env.Close()
	}), nil
}
