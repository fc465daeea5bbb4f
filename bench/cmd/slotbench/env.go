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

// openEnv starts the harness's cluster, or attaches to the user's (addrs)
// under prefix. The returned function tears down what openEnv set up: the
// harness's cluster, or every key under the prefix; it may be called more
// than once.
func openEnv(ctx context.Context, addrs, prefix string) (*bench.Env, func(), error) {
	if addrs == "" {
		fmt.Printf("slotbench: starting a 3+3 Redis Cluster (%s=%s)\n", redistest.EnvBackend, orDefault(os.Getenv(redistest.EnvBackend), "auto"))
		cluster, err := redistest.Start(ctx, redistest.Options{})
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
