package redistest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"
)

// startTimeout bounds a cluster start from the testing helpers: building the
// scratch image the first time on a slow machine is the long pole.
const startTimeout = 5 * time.Minute

// errNoMain is Require's reason when TestMain never called Main.
var errNoMain = errors.New("no cluster: the package's TestMain does not call redistest.Main")

// Main is for TestMain: it starts one cluster for the whole package (a
// start costs a second or more, too much per test), stores it in *dst, runs
// the tests and closes it. Use it as
//
//	var cluster *redistest.Cluster
//	func TestMain(m *testing.M) { os.Exit(redistest.Main(m, redistest.Options{}, &cluster)) }
//
// When no cluster can be started, under CI=true Main fails the package (exit
// 1, saying what is missing), because a CI run that skipped every
// integration test would pass without testing anything. Elsewhere it prints
// why and runs the tests, which skip through Require.
func Main(m *testing.M, opt Options, dst **Cluster) int {
	return mainWith(m, "Redis Cluster", func(ctx context.Context) (func(context.Context) string, func() error, error) {
		c, err := Start(ctx, opt)
		if err != nil {
			*dst = &Cluster{startErr: err}
			return nil, nil, err
		}
		*dst = c
		return c.Describe, c.Close, nil
	})
}

// mainWith is Main's rule for whatever a package's tests share (a cluster,
// deployments): start it, say which server it is, run the tests, close it.
// When it cannot start, CI=true fails the package; elsewhere the tests run
// and skip through Require.
func mainWith(m *testing.M, what string, start func(context.Context) (describe func(context.Context) string, close func() error, err error)) int {
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	describe, closeIt, err := start(ctx)
	cancel()
	if err != nil {
		if underCI() {
			fmt.Fprintf(os.Stderr, "redistest: CI=true and no %s: %v\n", what, err)
			return 1
		}
		fmt.Fprintf(os.Stderr, "redistest: no %s, tests that need one skip: %v\n", what, err)
		return m.Run()
	}
	// Which server a run tested is part of its result: go test shows this
	// line with -v and whenever the package fails.
	ictx, icancel := context.WithTimeout(context.Background(), 10*time.Second)
	fmt.Fprintf(os.Stderr, "redistest: %s\n", describe(ictx))
	icancel()
	code := m.Run()
	if err := closeIt(); err != nil {
		fmt.Fprintf(os.Stderr, "redistest: close: %v\n", err)
		if code == 0 {
			code = 1
		}
	}
	return code
}

// Require returns c for a test that needs the package's cluster; when Main
// could not start one it skips the test with the reason, or under CI=true
// fails it.
func Require(tb testing.TB, c *Cluster) *Cluster {
	tb.Helper()
	switch {
	case c == nil:
		missing(tb, errNoMain)
	case c.startErr != nil:
		missing(tb, c.startErr)
	}
	return c
}

// StartForTest starts a cluster private to one test, for tests that break
// it beyond repair or need other Options; t.Cleanup closes it. A failure to
// start skips the test, or under CI=true fails it.
func StartForTest(tb testing.TB, opt Options) *Cluster {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	c, err := Start(ctx, opt)
	if err != nil {
		missing(tb, err)
		return nil
	}
	tb.Logf("redistest: %s", c.Describe(ctx))
	tb.Cleanup(func() {
		if err := c.Close(); err != nil {
			tb.Errorf("redistest: close: %v", err)
		}
	})
	return c
}

// StartStandaloneForTest is StartForTest for a single non-cluster server,
// with the same skip-or-fail rule.
func StartStandaloneForTest(tb testing.TB, opt Options) *Cluster {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	c, err := StartStandalone(ctx, opt)
	if err != nil {
		missing(tb, err)
		return nil
	}
	tb.Logf("redistest: %s", c.Describe(ctx))
	tb.Cleanup(func() {
		if err := c.Close(); err != nil {
			tb.Errorf("redistest: close: %v", err)
		}
	})
	return c
}

func missing(tb testing.TB, err error) {
	tb.Helper()
	if underCI() {
		tb.Fatalf("redistest: CI=true and no Redis Cluster: %v", err)
	}
	tb.Skipf("redistest: no Redis Cluster: %v", err)
}
