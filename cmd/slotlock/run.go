package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/slotlock/slotlock"
)

// runCmd is flock(1) for a Redis Cluster: it takes every key of --keys
// (all or nothing), runs the command while the Locker's watchdog renews
// the lease, releases the keys when the command exits and returns its
// status.
//
// The command runs in a process group of its own, so that a lost lease
// stops all of it (a shell and what it started), not only its first
// process: SIGTERM to the group, SIGKILL after --grace. The signals a
// terminal or a supervisor sends the tool (INT, TERM, HUP, QUIT) are passed
// on to the group; the keys are released when the command has exited.
func runCmd(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs, c := newFlags("run", stderr)
	keyList := fs.String("keys", "", "comma-separated keys to hold while CMD runs (required)")
	ttl := fs.Duration("ttl", slotlock.DefaultTTL, "lease TTL: how long the keys outlive a crashed slotlock; renewed every TTL/3")
	wait := fs.Duration("wait", 10*time.Second, "how long to wait for busy keys (0: give up at once)")
	grace := fs.Duration("grace", 10*time.Second, "after a lost lease, time between SIGTERM and SIGKILL")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: slotlock run --keys K1,K2 [--ttl 30s] [--wait 10s] [--grace 10s] -- CMD [ARGS...]")
		fs.PrintDefaults()
	}
	if code, ok := parse(fs, args); !ok {
		return code
	}
	argv := fs.Args()
	if *keyList == "" {
		return fail(stderr, usagef("--keys: no keys"))
	}
	keys := strings.Split(*keyList, ",")
	if err := checkKeys(keys); err != nil {
		return fail(stderr, fmt.Errorf("--keys: %w", err))
	}
	if len(argv) == 0 {
		return fail(stderr, usagef("no command: slotlock run --keys ... -- CMD [ARGS...]"))
	}
	if *ttl <= 0 {
		return fail(stderr, usagef("--ttl must be positive"))
	}
	if *wait < 0 || *grace < 0 {
		return fail(stderr, usagef("--wait and --grace cannot be negative"))
	}
	l, closeAll, err := c.locker(slotlock.Options{TTL: *ttl})
	if err != nil {
		return fail(stderr, err)
	}
	defer closeAll()

	lease, code := acquire(l, keys, *wait, c.timeout, stderr)
	if lease == nil {
		return code
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, stdout, stderr
	cmd.Env = append(os.Environ(), "SLOTLOCK_LEASE_ID="+lease.ID())
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT)
	defer signal.Stop(sigs)
	if err := cmd.Start(); err != nil {
		release(lease, c.timeout, stderr)
		fmt.Fprintf(stderr, "slotlock: %v\n", err)
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
			return exitNotFound
		}
		return exitCannotRun
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()

	group := -cmd.Process.Pid
	var kill <-chan time.Time
	lost := false
	done := lease.Done()
	for {
		select {
		case <-exited:
			if lost {
				release(lease, c.timeout, stderr) // whatever keys it still held
				return exitLost
			}
			if rerr := release(lease, c.timeout, stderr); errors.Is(rerr, slotlock.ErrNotHeld) {
				// Lost between the last check and the exit: the command
				// may have run part of its time unprotected.
				return exitLost
			}
			return status(cmd.ProcessState)
		case <-done:
			done = nil
			if !errors.Is(lease.Err(), slotlock.ErrLeaseLost) {
				continue
			}
			lost = true
			fmt.Fprintf(stderr, "slotlock: %v: lease lost; sending SIGTERM to the command (pid %d), SIGKILL in %v\n",
				strings.TrimPrefix(lease.Err().Error(), "slotlock: "), cmd.Process.Pid, *grace)
			_ = syscall.Kill(group, syscall.SIGTERM)
			kill = time.After(*grace)
		case <-kill:
			fmt.Fprintf(stderr, "slotlock: the command did not exit within %v of SIGTERM: SIGKILL\n", *grace)
			_ = syscall.Kill(group, syscall.SIGKILL)
			kill = nil
		case s := <-sigs:
			_ = syscall.Kill(group, s.(syscall.Signal))
		}
	}
}

// acquire takes keys, waiting up to wait (TryLock when wait is 0). On
// failure it prints why and returns nil and the exit code.
func acquire(l *slotlock.Locker, keys []string, wait, timeout time.Duration, stderr io.Writer) (*slotlock.Lease, int) {
	var (
		lease *slotlock.Lease
		err   error
	)
	if wait == 0 {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		lease, err = l.TryLock(ctx, keys...)
		cancel()
	} else {
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		lease, err = l.Lock(ctx, keys...)
		cancel()
	}
	switch {
	case err == nil:
		return lease, exitOK
	case errors.Is(err, slotlock.ErrNotAcquired):
		fmt.Fprintf(stderr, "slotlock: keys busy: %v\n", strings.TrimPrefix(err.Error(), "slotlock: "))
		return nil, exitNotAcquired
	case wait > 0 && errors.Is(err, context.DeadlineExceeded):
		fmt.Fprintf(stderr, "slotlock: keys still busy after --wait %v; nothing held, the command did not run\n", wait)
		return nil, exitNotAcquired
	}
	return nil, fail(stderr, err)
}

// release gives the keys back, bounded by timeout; a failure is printed
// (the keys then expire by their TTL) and returned.
func release(lease *slotlock.Lease, timeout time.Duration, stderr io.Writer) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	err := lease.Release(ctx)
	if err != nil {
		fmt.Fprintf(stderr, "slotlock: release: %v\n", strings.TrimPrefix(err.Error(), "slotlock: "))
	}
	return err
}

// status is the exit code a shell would give for the command's end.
func status(ps *os.ProcessState) int {
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}
