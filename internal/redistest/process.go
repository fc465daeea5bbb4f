package redistest

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// processLauncher runs nodes as child processes of the test binary, each in
// its own directory under one temporary root.
type processLauncher struct {
	bin  string
	root string
}

func newProcessLauncher() (*processLauncher, error) {
	bin, err := redisServerPath()
	if err != nil {
		return nil, err
	}
	root, err := os.MkdirTemp("", "slotlock-redis-")
	if err != nil {
		return nil, fmt.Errorf("redistest: temp dir for nodes: %w", err)
	}
	return &processLauncher{bin: bin, root: root}, nil
}

func (l *processLauncher) launch(ctx context.Context, spec nodeSpec) (nodeRunner, error) {
	dir := filepath.Join(l.root, "node-"+strconv.Itoa(spec.port))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("redistest: node dir: %w", err)
	}
	if spec.tls != nil {
		spec.tlsDir = spec.tls.dir
	}
	args := serverArgs(spec, dir)
	args = append(args, "--logfile", filepath.Join(dir, "redis.log"))
	r := &processRunner{bin: l.bin, dir: dir, args: args, addr: spec.addr(), tls: spec.tlsClient()}
	if err := r.start(ctx); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return r, nil
}

func (l *processLauncher) source() string { return l.bin }

func (l *processLauncher) close(context.Context) error {
	if err := os.RemoveAll(l.root); err != nil {
		return fmt.Errorf("redistest: remove %s: %w", l.root, err)
	}
	return nil
}

// processRunner is one redis-server process. The process is a child of the
// test binary that dies with it (see nodeSysProcAttr), so an aborted test run
// leaves no node behind.
type processRunner struct {
	bin  string
	dir  string
	args []string
	addr string
	tls  *tls.Config // nil without TLS

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when the current process has been reaped
}

func (r *processRunner) String() string { return "pid " + strconv.Itoa(r.pid()) }

func (r *processRunner) pid() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cmd == nil || r.cmd.Process == nil {
		return 0
	}
	return r.cmd.Process.Pid
}

func (r *processRunner) start(ctx context.Context) error {
	cmd := exec.Command(r.bin, r.args...)
	cmd.Dir = r.dir
	cmd.SysProcAttr = nodeSysProcAttr()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("redistest: start %s: %w", r.bin, err)
	}
	done := make(chan struct{})
	go func() {
		cmd.Wait()
		close(done)
	}()
	r.mu.Lock()
	r.cmd, r.done = cmd, done
	r.mu.Unlock()

	exited := func() error {
		select {
		case <-done:
		default:
			return nil
		}
		tail := r.logTail()
		if bytes.Contains(tail, []byte("Address already in use")) {
			return fmt.Errorf("redistest: node %s: %w", r.addr, errPortTaken)
		}
		return fmt.Errorf("redistest: node %s exited at start-up (%s); log ends:\n%s", r.addr, cmd.ProcessState, tail)
	}
	if err := waitPing(ctx, r.addr, r.tls, 20*time.Second, exited); err != nil {
		r.kill(context.Background())
		return err
	}
	return nil
}

func (r *processRunner) logTail() []byte {
	b, _ := os.ReadFile(filepath.Join(r.dir, "redis.log"))
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return b
}

func (r *processRunner) restart(ctx context.Context) error { return r.start(ctx) }

func (r *processRunner) signal(sig syscall.Signal) error {
	r.mu.Lock()
	cmd, done := r.cmd, r.done
	r.mu.Unlock()
	if cmd == nil {
		return nil
	}
	select {
	case <-done:
		return errors.New("process has exited")
	default:
	}
	return cmd.Process.Signal(sig)
}

func (r *processRunner) kill(ctx context.Context) error {
	r.mu.Lock()
	cmd, done := r.cmd, r.done
	r.mu.Unlock()
	if cmd == nil {
		return nil
	}
	cmd.Process.Signal(syscall.SIGKILL) // an error means it is already gone
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("pid %d still running after SIGKILL: %w", cmd.Process.Pid, ctx.Err())
	}
}

func (r *processRunner) pause(ctx context.Context) error {
	if err := r.signal(syscall.SIGSTOP); err != nil {
		return err
	}
	return waitStopped(ctx, r.pid(), true)
}

func (r *processRunner) resume(ctx context.Context) error {
	if err := r.signal(syscall.SIGCONT); err != nil {
		return err
	}
	return waitStopped(ctx, r.pid(), false)
}

func (r *processRunner) destroy(ctx context.Context) error { return r.kill(ctx) }
