package quorum_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/slotlock/slotlock/internal/redistest"
	"github.com/slotlock/slotlock/quorum"
)

// shared are three standalone servers for the examples and the tests that
// break nothing; tests that kill or freeze a deployment start their own.
var shared redistest.Deployments

func TestMain(m *testing.M) {
	os.Exit(redistest.MainDeployments(m, 3, redistest.Options{}, &shared))
}

// env is one test's deployments, a client for each and a key prefix.
type env struct {
	t       testing.TB
	d       redistest.Deployments
	clients []rueidis.Client
	prefix  string
}

func newEnvOn(t testing.TB, d redistest.Deployments) *env {
	t.Helper()
	e := &env{t: t, d: d}
	for _, c := range d {
		cl, err := c.Client()
		require.NoError(t, err)
		t.Cleanup(cl.Close)
		e.clients = append(e.clients, cl)
	}
	r := strings.NewReplacer("/", ":", "{", "(", "}", ")", " ", "_")
	e.prefix = "q:" + r.Replace(t.Name())
	return e
}

// sharedEnv is an env on the package's deployments.
func sharedEnv(t testing.TB) *env {
	t.Helper()
	return newEnvOn(t, redistest.RequireDeployments(t, shared))
}

// privateEnv starts n deployments for t alone.
func privateEnv(t testing.TB, n int) *env {
	t.Helper()
	return newEnvOn(t, redistest.StartDeploymentsForTest(t, n, redistest.Options{}))
}

func (e *env) locker(opt quorum.Options) *quorum.Locker {
	e.t.Helper()
	opt.Prefix = e.prefix
	l, err := quorum.New(e.clients, opt)
	require.NoError(e.t, err)
	e.t.Cleanup(func() { _ = l.Close() })
	return l
}

func ctxT(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// keysOn returns every key under the test's prefix on deployment i, lock
// keys and anything else slotlock may have written: the ground truth.
func (e *env) keysOn(ctx context.Context, i int) []string {
	e.t.Helper()
	n := e.d.Node(i)
	var out []string
	cursor := "0"
	for {
		res, err := n.Do(ctx, "SCAN", cursor, "MATCH", e.prefix+"*", "COUNT", "1000").ToArray()
		require.NoError(e.t, err, "SCAN on deployment %d", i)
		cursor, err = res[0].ToString()
		require.NoError(e.t, err)
		keys, err := res[1].AsStrSlice()
		require.NoError(e.t, err)
		out = append(out, keys...)
		if cursor == "0" {
			return out
		}
	}
}

// lockedOn says which deployments hold at least one key of the prefix.
func (e *env) lockedOn(ctx context.Context) map[int][]string {
	e.t.Helper()
	out := map[int][]string{}
	for i := range e.d {
		if ks := e.keysOn(ctx, i); len(ks) > 0 {
			out[i] = ks
		}
	}
	return out
}
