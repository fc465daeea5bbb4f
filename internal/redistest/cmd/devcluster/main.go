// Command devcluster keeps a Redis Cluster from the test harness running
// until it gets SIGTERM or SIGINT, for poking at the lock library by hand
// (redis-cli -c, benchmarks, examples) with the same cluster the tests use.
//
// It writes the node addresses, comma separated on one line, to
// <state>/devcluster.addrs and its pid to <state>/devcluster.pid, and removes
// both when it stops. `make cluster-up` and `make cluster-down` drive it.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/slotlock/slotlock/internal/redistest"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "devcluster:", err)
		os.Exit(1)
	}
}

func run() error {
	backend := flag.String("backend", string(redistest.BackendProcess), "where nodes run: process, docker or auto")
	masters := flag.Int("masters", 3, "number of masters")
	replicas := flag.Int("replicas", 1, "replicas per master (0 for none)")
	state := flag.String("state", ".cache", "directory for devcluster.addrs and devcluster.pid")
	flag.Parse()

	// Catch the signals before starting, so a cluster-down during start-up
	// still runs Close.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	defer stop()

	opt := redistest.Options{Backend: redistest.Backend(*backend), Masters: *masters, Replicas: *replicas}
	if *replicas == 0 {
		opt.Replicas = redistest.NoReplicas
	}
	startCtx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	c, err := redistest.Start(startCtx, opt)
	cancel()
	if err != nil {
		return err
	}
	defer c.Close()

	if err := os.MkdirAll(*state, 0o755); err != nil {
		return err
	}
	addrsFile := filepath.Join(*state, "devcluster.addrs")
	pidFile := filepath.Join(*state, "devcluster.pid")
	defer os.Remove(addrsFile)
	defer os.Remove(pidFile)
	if err := writeAtomic(pidFile, strconv.Itoa(os.Getpid())+"\n"); err != nil {
		return err
	}
	// The addresses come last: their file appearing is the signal that
	// the cluster is ready.
	addrs := strings.Join(c.Addrs(), ",")
	if err := writeAtomic(addrsFile, addrs+"\n"); err != nil {
		return err
	}
	fmt.Printf("devcluster: %s cluster ready: %s (pid %d)\n", c.Backend(), addrs, os.Getpid())
	fmt.Printf("devcluster: %s\n", c.Describe(ctx))

	<-ctx.Done()
	fmt.Println("devcluster: stopping")
	if err := c.Close(); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

// writeAtomic replaces path in one rename, so a reader polling for the file
// never sees it half written.
func writeAtomic(path, content string) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
