package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/slotlock/slotlock"
	"github.com/slotlock/slotlock/internal/lockval"
	"github.com/slotlock/slotlock/internal/redistest"
	"github.com/slotlock/slotlock/slot"
)

// The tests build the command with go build and run it as a separate
// process against the package's cluster. The commands that `run` starts
// are this test binary again, in a child mode (childEnv) that says what
// it did through files.

var (
	cluster *redistest.Cluster
	bin     string // the built slotlock
)

const childEnv = "SLOTLOCK_CLI_TEST_CHILD"

func TestMain(m *testing.M) {
	if mode := os.Getenv(childEnv); mode != "" {
		os.Exit(child(mode))
	}
	dir, err := os.MkdirTemp("", "slotlock-cli")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bin = filepath.Join(dir, "slotlock")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "go build: %v\n%s", err, out)
		os.Exit(1)
	}
	code := redistest.Main(m, redistest.Options{}, &cluster)
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// child is a command for `slotlock run`: "exit:N" exits N; the others
// take a file path F and write F.started (with their pid) first:
// "hold:F" exits 0 once F exists; "term:F" writes F.term and exits 0 on
// SIGTERM; "ignoreterm:F" ignores SIGTERM; "marker:F" writes F and exits.
// None lives longer than a minute.
func child(mode string) int {
	kind, arg, _ := strings.Cut(mode, ":")
	if kind == "exit" {
		n, _ := strconv.Atoi(arg)
		return n
	}
	if kind == "marker" {
		_ = os.WriteFile(arg, nil, 0o600)
		return 0
	}
	terms := make(chan os.Signal, 1)
	switch kind {
	case "term":
		signal.Notify(terms, syscall.SIGTERM)
	case "ignoreterm":
		signal.Ignore(syscall.SIGTERM)
	}
	// Written whole, then renamed: the test reads the pid as soon as the
	// file exists, and os.WriteFile creates it empty first (the test once
	// read "" and failed to parse it).
	_ = os.WriteFile(arg+".started.tmp", []byte(strconv.Itoa(os.Getpid())), 0o600)
	_ = os.Rename(arg+".started.tmp", arg+".started")
	deadline := time.After(time.Minute)
	for {
		select {
		case <-terms:
			_ = os.WriteFile(arg+".term", nil, 0o600)
			return 0
		case <-deadline:
			return 9
		case <-time.After(10 * time.Millisecond):
			if _, err := os.Stat(arg); kind == "hold" && err == nil {
				return 0
			}
		}
	}
}

// env is one test's view: its prefix, a client, and the flags that point
// the command at the cluster.
type env struct {
	t      *testing.T
	c      *redistest.Cluster
	client rueidis.Client
	prefix string
	names  slot.Namer
	dir    string
}

func newEnv(t *testing.T) *env {
	t.Helper()
	c := redistest.Require(t, cluster)
	client, err := c.Client()
	require.NoError(t, err)
	t.Cleanup(client.Close)
	prefix := "cli:" + strings.ReplaceAll(t.Name(), "/", ":")
	names, err := slot.NewNamer(prefix)
	require.NoError(t, err)
	return &env{t: t, c: c, client: client, prefix: prefix, names: names, dir: t.TempDir()}
}

func (e *env) locker(opt slotlock.Options) *slotlock.Locker {
	opt.Prefix = e.prefix
	l, err := slotlock.New(e.client, opt)
	require.NoError(e.t, err)
	e.t.Cleanup(func() { _ = l.Close() })
	return l
}

// result is one run of the command.
type result struct {
	stdout, stderr string
	code           int
}

// cli runs the command: sub, then the connection flags, then args.
func (e *env) cli(stdin string, sub string, args ...string) result {
	e.t.Helper()
	all := append([]string{sub, "--addrs", strings.Join(e.c.Addrs(), ","), "--prefix", e.prefix}, args...)
	return e.raw(stdin, all...)
}

// cliAsync is cli in a goroutine, for a command the test acts on while it
// runs.
func (e *env) cliAsync(sub string, args ...string) <-chan result {
	done := make(chan result, 1)
	go func() { done <- e.cli("", sub, args...) }()
	return done
}

// raw runs the command with exactly args.
func (e *env) raw(stdin string, args ...string) result {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	var out, errb bytes.Buffer
	cmd.Stdin, cmd.Stdout, cmd.Stderr = strings.NewReader(stdin), &out, &errb
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else {
		require.NoError(e.t, err)
	}
	return result{out.String(), errb.String(), code}
}

// self is the command line that runs this test binary in child mode.
func self(mode string) []string {
	return []string{"env", childEnv + "=" + mode, os.Args[0]}
}

// lockKeys returns every key under the test's prefix with its type: the
// ground truth of what is locked.
func (e *env) lockKeys() map[string]string {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	masters, err := e.c.Masters(ctx)
	require.NoError(e.t, err)
	out := map[string]string{}
	for _, m := range masters {
		keys, err := m.Do(ctx, "KEYS", e.prefix+"{*").AsStrSlice()
		require.NoError(e.t, err)
		for _, k := range keys {
			v, err := m.Do(ctx, "GET", k).ToString()
			if err != nil {
				v = "(" + err.Error() + ")"
			}
			out[k] = v
		}
	}
	return out
}

func waitFile(t *testing.T, path string) string {
	t.Helper()
	var b []byte
	require.Eventually(t, func() bool {
		var err error
		b, err = os.ReadFile(path)
		return err == nil
	}, time.Minute, 10*time.Millisecond, "%s never appeared", path)
	return string(b)
}

// keyslot names each key's slot (as the server computes it), master and
// lock key.
func TestKeyslot(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	keys := []string{"order:42", "{user:7}:cart", "a}b"}
	r := e.cli("", "keyslot", keys...)
	require.Equal(t, 0, r.code, r.stderr)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	require.Len(t, lines, 1+len(keys))
	require.Equal(t, []string{"KEY", "SLOT", "NODE", "LOCK", "KEY"}, strings.Fields(lines[0]))
	for i, k := range keys {
		f := strings.Fields(lines[1+i])
		require.Equal(t, k, f[0])
		want, err := e.client.Do(ctx, e.client.B().ClusterKeyslot().Key(k).Build()).AsInt64()
		require.NoError(t, err)
		require.Equal(t, strconv.FormatInt(want, 10), f[1], "slot of %q", k)
		master, err := e.c.NodeForSlot(ctx, uint16(want))
		require.NoError(t, err)
		require.Equal(t, master.Addr(), f[2])
		require.Equal(t, e.names.LockKey(k), f[3])
	}
	off := e.raw("", "keyslot", "--offline", "--addrs", "127.0.0.1:1", keys[0])
	require.Equal(t, 0, off.code, off.stderr)
	require.Contains(t, off.stdout, " - ")
}

// inspect shows a held key's holder (the lease's ID, never its token),
// fencing token and TTL, as a table and as JSON; a free key as free.
func TestInspect(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	l := e.locker(slotlock.Options{Fencing: true, TTL: 30 * time.Second})
	lease, err := l.Lock(ctx, "inv:1")
	require.NoError(t, err)
	defer lease.Release(ctx)

	r := e.cli("", "inspect", "--json", "inv:1", "inv:2")
	require.Equal(t, 0, r.code, r.stderr)
	require.NotContains(t, r.stdout, lease.Token())
	var got []jsonKey
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &got))
	require.Len(t, got, 2)
	fence, _ := lease.FencingToken("inv:1")
	require.Equal(t, "held", got[0].State)
	require.Equal(t, lease.ID(), got[0].Holder)
	require.Equal(t, fence, got[0].Fence)
	require.Equal(t, 1, got[0].Holds)
	require.Greater(t, got[0].TTLMillis, int64(20_000))
	require.Equal(t, e.names.LockKey("inv:1"), got[0].LockKey)
	require.Equal(t, "free", got[1].State)
	require.Empty(t, got[1].Holder)
	require.Zero(t, got[1].TTLMillis)

	r = e.cli("", "inspect", "inv:1", "inv:2")
	require.Equal(t, 0, r.code, r.stderr)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	require.Len(t, lines, 3)
	f := strings.Fields(lines[1])
	require.Equal(t, []string{"inv:1", "held", lease.ID(), "1"}, f[:4])
	require.Equal(t, strconv.FormatInt(fence, 10), f[5])
	require.Equal(t, []string{"inv:2", "free", "-", "0", "-", "-", "0"}, strings.Fields(lines[2])[:7])
}

// run holds the keys while the command runs, past several TTLs (the
// watchdog renews), and releases them when it exits 0.
func TestRunHoldsWhileTheCommandRuns(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	l := e.locker(slotlock.Options{})
	flag := filepath.Join(e.dir, "go")
	// A TTL of 1 s: the watchdog renews every third of it, and a child
	// process on a loaded 2-core machine (CI runs the suites in parallel)
	// missed two renewals of a 300 ms TTL in a row once in six runs.
	done := e.cliAsync("run", append([]string{"--keys", "job:1,job:2", "--ttl", "1s", "--"}, self("hold:"+flag)...)...)
	waitFile(t, flag+".started")
	// Three TTLs: without renewal the keys would expire and a TryLock
	// would take them.
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end); {
		_, err := l.TryLock(ctx, "job:2")
		require.ErrorIs(t, err, slotlock.ErrNotAcquired)
		time.Sleep(50 * time.Millisecond)
	}
	infos, err := l.Inspect(ctx, "job:1", "job:2")
	require.NoError(t, err)
	require.True(t, infos[0].Held)
	require.Equal(t, infos[0].Holder, infos[1].Holder)
	require.NoError(t, os.WriteFile(flag, nil, 0o600))
	r := <-done
	require.Equal(t, 0, r.code, r.stderr)
	require.Empty(t, e.lockKeys(), "released")
}

// run returns the command's own status, and releases.
func TestRunReturnsTheStatus(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r := e.cli("", "run", append([]string{"--keys", "st:1,st:2"}, append([]string{"--"}, self("exit:3")...)...)...)
	require.Equal(t, 3, r.code, r.stderr)
	require.Empty(t, e.lockKeys())
	r = e.cli("", "run", "--keys", "st:1", "--", "sh", "-c", "kill -KILL $$")
	require.Equal(t, 128+9, r.code, r.stderr)
	require.Empty(t, e.lockKeys())
	r = e.cli("", "run", "--keys", "st:1", "--", filepath.Join(e.dir, "no-such-command"))
	require.Equal(t, exitNotFound, r.code, r.stderr)
	require.Empty(t, e.lockKeys())
}

// A command that outlives its lease, whose key an operator deletes, gets
// SIGTERM; the tool exits with exitLost and leaves nothing locked.
func TestRunLeaseLostSignalsTheCommand(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	flag := filepath.Join(e.dir, "c")
	done := e.cliAsync("run", append([]string{"--keys", "lost:1,lost:2", "--ttl", "10s", "--"}, self("term:"+flag)...)...)
	waitFile(t, flag+".started")
	require.NoError(t, e.client.Do(ctx, e.client.B().Del().Key(e.names.LockKey("lost:2")).Build()).Error())
	r := <-done
	require.Equal(t, exitLost, r.code, r.stderr)
	require.Contains(t, r.stderr, "lease lost")
	require.Contains(t, r.stderr, `"lost:2"`)
	waitFile(t, flag+".term") // the command saw SIGTERM
	require.Empty(t, e.lockKeys(), "lost:1 released too")
}

// A command that ignores SIGTERM is killed after --grace.
func TestRunLeaseLostKillsAfterGrace(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	flag := filepath.Join(e.dir, "c")
	done := e.cliAsync("run", append([]string{"--keys", "kill:1", "--grace", "300ms", "--"}, self("ignoreterm:"+flag)...)...)
	pid, err := strconv.Atoi(waitFile(t, flag+".started"))
	require.NoError(t, err)
	t0 := time.Now()
	require.NoError(t, e.client.Do(ctx, e.client.B().Del().Key(e.names.LockKey("kill:1")).Build()).Error())
	r := <-done
	require.Equal(t, exitLost, r.code, r.stderr)
	require.Contains(t, r.stderr, "SIGKILL")
	require.GreaterOrEqual(t, time.Since(t0), 300*time.Millisecond)
	require.ErrorIs(t, syscall.Kill(pid, 0), syscall.ESRCH, "the command is gone")
	require.Empty(t, e.lockKeys())
}

// A wait that times out: distinct exit code, the command never ran, and
// nothing of the tool's is left locked (the other holder's key only).
func TestRunWaitTimesOut(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	l := e.locker(slotlock.Options{})
	held, err := l.Lock(ctx, "busy:2")
	require.NoError(t, err)
	defer held.Release(ctx)
	before := e.lockKeys()
	marker := filepath.Join(e.dir, "ran")
	t0 := time.Now()
	r := e.cli("", "run", append([]string{"--keys", "busy:1,busy:2", "--wait", "400ms", "--"}, self("marker:"+marker)...)...)
	require.Equal(t, exitNotAcquired, r.code, r.stderr)
	require.GreaterOrEqual(t, time.Since(t0), 400*time.Millisecond)
	require.Contains(t, r.stderr, "still busy after --wait 400ms")
	require.NoFileExists(t, marker)
	requireSameHolders(t, before, e.lockKeys())

	r = e.cli("", "run", append([]string{"--keys", "busy:1,busy:2", "--wait", "0", "--"}, self("marker:"+marker)...)...)
	require.Equal(t, exitNotAcquired, r.code, r.stderr)
	require.Contains(t, r.stderr, `"busy:2"`)
	require.NoFileExists(t, marker)
	requireSameHolders(t, before, e.lockKeys())
}

// requireSameHolders checks that after has the lock keys of before with
// the same holders (a waiter's mark aside: a waiter that gave up leaves it).
func requireSameHolders(t *testing.T, before, after map[string]string) {
	t.Helper()
	require.Len(t, after, len(before))
	for k, v := range before {
		require.Equal(t, lockval.Holder(v), lockval.Holder(after[k]), "key %q", k)
	}
}

// release --force asks first (no means nothing deleted), says what it
// deleted, and the holder's lease ends lost.
func TestReleaseForce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	l := e.locker(slotlock.Options{})
	octx := slotlock.WithOwner(ctx, "stuck-job")
	a, err := l.Lock(octx, "rel:1")
	require.NoError(t, err)
	_, err = l.Lock(octx, "rel:1")
	require.NoError(t, err)
	owner := l.OwnerID("stuck-job")

	r := e.cli("n\n", "release", "--force", "rel:1", "rel:free")
	require.Equal(t, exitAborted, r.code, r.stderr)
	require.Contains(t, r.stderr, "rel:1: held (held by "+owner+", 2 holds)")
	require.Contains(t, r.stderr, "nothing deleted")
	require.Len(t, e.lockKeys(), 2, "lock key and hold set still there")

	r = e.cli("", "release", "rel:1")
	require.Equal(t, exitUsage, r.code)
	require.Contains(t, r.stderr, "--force")

	r = e.cli("y\n", "release", "--force", "rel:1", "rel:free")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "rel:1: deleted "+e.names.LockKey("rel:1")+" (held by "+owner+")")
	require.Contains(t, r.stdout, "rel:1: deleted its hold set")
	require.Contains(t, r.stdout, "rel:free: not locked, nothing deleted")
	require.Empty(t, e.lockKeys())
	select {
	case <-a.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("the holder never saw its loss")
	}
	require.ErrorIs(t, a.Err(), slotlock.ErrLeaseLost)

	b, err := l.Lock(ctx, "rel:2")
	require.NoError(t, err)
	r = e.cli("", "release", "--force", "--yes", "rel:2")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "(held by "+b.ID()+")")
	require.Empty(t, e.lockKeys())
}

// A shared key: inspect shows its readers, and release --force deletes its
// holders set with its lock, so the readers' leases end lost (a holders
// set left behind would count them as readers again once the key is
// shared by two others, and renew them).
func TestSharedInspectAndReleaseForce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	l := e.locker(slotlock.Options{})
	var readers []*slotlock.Lease
	for range 2 {
		r, err := l.Acquire(ctx, slotlock.Request{Shared: []string{"sh:1"}})
		require.NoError(t, err)
		readers = append(readers, r)
	}

	r := e.cli("", "inspect", "--json", "sh:1")
	require.Equal(t, 0, r.code, r.stderr)
	var got []jsonKey
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &got))
	require.Equal(t, "shared", got[0].State)
	require.Equal(t, 2, got[0].Holds)
	require.ElementsMatch(t, []string{readers[0].ID(), readers[1].ID()}, got[0].Readers)
	require.Empty(t, got[0].Holder)

	r = e.cli("", "release", "--force", "--yes", "sh:1")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "sh:1: deleted "+e.names.LockKey("sh:1")+" (readers)")
	require.Contains(t, r.stdout, "sh:1: deleted its holders set")
	require.Empty(t, e.lockKeys(), "lock and holders set gone")
	for _, le := range readers {
		select {
		case <-le.Done():
		case <-time.After(30 * time.Second):
			t.Fatal("a reader never saw its loss")
		}
		require.ErrorIs(t, le.Err(), slotlock.ErrLeaseLost)
	}
}

// inspect --permits shows a resource's units in use, its limit and its
// holders, as JSON and as a table.
func TestInspectPermits(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	l := e.locker(slotlock.Options{})
	lease, err := l.Acquire(ctx, slotlock.Request{Permits: []slotlock.Permit{{Resource: "pool:x", Units: 3, Limit: 5}}})
	require.NoError(t, err)
	defer lease.Release(ctx)

	r := e.cli("", "inspect", "--permits", "--json", "pool:x", "pool:y")
	require.Equal(t, 0, r.code, r.stderr)
	var got []jsonPermit
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &got))
	require.Len(t, got, 2)
	require.Equal(t, int64(3), got[0].Used)
	require.Equal(t, int64(5), got[0].Limit)
	require.Len(t, got[0].Holders, 1)
	require.Equal(t, lease.ID(), got[0].Holders[0].ID)
	require.Equal(t, int64(3), got[0].Holders[0].Units)
	require.Greater(t, got[0].Holders[0].TTLMillis, int64(1000))
	require.Zero(t, got[1].Used)
	require.Empty(t, got[1].Holders)

	r = e.cli("", "inspect", "--permits", "pool:x")
	require.Equal(t, 0, r.code, r.stderr)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	require.Len(t, lines, 2)
	require.Equal(t, []string{"pool:x", "3", "5", "1", lease.ID() + ":3"}, strings.Fields(lines[1])[:5])
	require.NotContains(t, r.stdout, lease.Token())
}

// Bad input: a clear message on stderr, the documented non-zero code, and
// nothing locked.
func TestBadInput(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for _, c := range []struct {
		name string
		args []string
		raw  bool // without the env's connection flags
		code int
		msg  string
	}{
		{"no command", nil, true, exitUsage, "usage: slotlock COMMAND"},
		{"unknown command", []string{"frobnicate"}, true, exitUsage, `unknown command "frobnicate"`},
		{"inspect without keys", []string{"inspect"}, false, exitUsage, "no keys"},
		{"keyslot without keys", []string{"keyslot"}, false, exitUsage, "no keys"},
		{"release without keys", []string{"release", "--force"}, false, exitUsage, "no keys"},
		{"inspect with an empty key", []string{"inspect", "a", ""}, false, exitUsage, "key 2 of 2 is empty"},
		{"unknown flag", []string{"inspect", "--bogus", "a"}, false, exitUsage, "flag provided but not defined: -bogus"},
		{"run without keys", []string{"run", "--", "true"}, false, exitUsage, "--keys: no keys"},
		{"run with an empty key", []string{"run", "--keys", "a,,b", "--", "true"}, false, exitUsage, "key 2 of 3 is empty"},
		{"run without a command", []string{"run", "--keys", "a"}, false, exitUsage, "no command"},
		{"run with no TTL", []string{"run", "--keys", "a", "--ttl", "0s", "--", "true"}, false, exitUsage, "--ttl must be positive"},
		{"run with a TTL below 1ms", []string{"run", "--keys", "a", "--ttl", "500us", "--", "true"}, false, exitUsage, "TTL 500µs is below 1ms"},
		{"bad address", []string{"inspect", "--addrs", "nowhere", "a"}, true, exitUsage, `"nowhere" is not host:port`},
		{"unreachable (inspect)", []string{"inspect", "--addrs", "127.0.0.1:1", "a"}, true, exitUnavailable, "cannot connect to 127.0.0.1:1"},
		{"unreachable (run)", []string{"run", "--addrs", "127.0.0.1:1", "--keys", "a", "--", "true"}, true, exitUnavailable, "cannot connect to 127.0.0.1:1"},
		{"unreachable (release)", []string{"release", "--addrs", "127.0.0.1:1", "--force", "--yes", "a"}, true, exitUnavailable, "cannot connect"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var r result
			if c.raw || len(c.args) == 0 {
				r = e.raw("", c.args...)
			} else {
				r = e.cli("", c.args[0], c.args[1:]...)
			}
			require.Equal(t, c.code, r.code, "stderr: %s", r.stderr)
			require.Contains(t, r.stderr, c.msg)
			require.Empty(t, r.stdout)
		})
	}
	require.Empty(t, e.lockKeys(), "nothing locked")
}

// TestOverTLS: the tool's TLS options against a TLS-only cluster (plain
// connections get no answer there): run takes and releases its keys with
// --tls-ca, inspect reads over TLS, and without TLS the tool reports the
// cluster unreachable. Mutation: tlsConfig ignoring --tls-ca (system
// roots, which do not trust the test CA) fails the first run.
func TestOverTLS(t *testing.T) {
	t.Parallel()
	c := redistest.StartForTest(t, redistest.Options{TLS: true})
	client, err := c.Client()
	require.NoError(t, err)
	t.Cleanup(client.Close)
	names, err := slot.NewNamer("cli:tls")
	require.NoError(t, err)
	e := &env{t: t, c: c, client: client, prefix: "cli:tls", names: names, dir: t.TempDir()}
	ca := c.TLSCAFile()
	require.FileExists(t, ca)

	marker := filepath.Join(e.dir, "ran")
	r := e.cli("", "run", append([]string{"--tls-ca", ca, "--keys", "tls:1,tls:2", "--"}, self("marker:"+marker)...)...)
	require.Equal(t, 0, r.code, r.stderr)
	require.FileExists(t, marker, "the command ran")
	require.Empty(t, e.lockKeys(), "released")

	l := e.locker(slotlock.Options{})
	lease, err := l.Lock(context.Background(), "tls:1")
	require.NoError(t, err)
	defer func() { _ = lease.Release(context.Background()) }()
	r = e.cli("", "inspect", "--tls-ca", ca, "--json", "tls:1")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, names.LockKey("tls:1"))
	require.Contains(t, r.stdout, lease.ID(), "the holder, read over TLS")

	r = e.cli("", "inspect", "tls:1")
	require.Equal(t, 69, r.code, "no TLS: unreachable (stdout %q, stderr %q)", r.stdout, r.stderr)
}
