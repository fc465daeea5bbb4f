package clustertest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
)

// child is this test binary run again as a separate process (a holder, a
// contender): the classic Go pattern, os/exec's own tests do it. It runs
// the test function run with envHelper set to role and its spec as JSON in
// specEnv, and reports lines tagged prefix on stdout, each handed to onLine
// in order; onEOF runs after the last. The test's cleanup kills and reaps
// it.
type child struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stderr bytes.Buffer
	waited chan struct{} // closed once the process is reaped
	once   sync.Once
}

func startChild(t *testing.T, run, role, specEnv string, spec any, prefix string, onLine func(string), onEOF func()) *child {
	t.Helper()
	b, err := json.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^"+run+"$", "-test.timeout=5m")
	cmd.Env = append(os.Environ(), envHelper+"="+role, specEnv+"="+string(b))
	c := &child{cmd: cmd, waited: make(chan struct{})}
	cmd.Stderr = &c.stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if c.stdin, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	read := make(chan struct{})
	go func() {
		defer close(read)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			if line, ok := strings.CutPrefix(sc.Text(), prefix); ok {
				onLine(line)
			}
		}
		onEOF()
	}()
	go func() {
		// Wait closes stdout once the process exits: only after every
		// line was read (os/exec: reads must complete before Wait).
		<-read
		_ = cmd.Wait()
		close(c.waited)
	}()
	t.Cleanup(func() {
		c.kill()
		if t.Failed() && c.stderr.Len() > 0 {
			t.Logf("%s stderr:\n%s", run, c.stderr.String())
		}
	})
	return c
}

// kill sends SIGKILL and waits until the process is reaped.
func (c *child) kill() {
	c.once.Do(func() {
		_ = c.cmd.Process.Kill()
		_ = c.stdin.Close()
		<-c.waited
	})
}
