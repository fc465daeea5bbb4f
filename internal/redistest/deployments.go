package redistest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
)

// Deployments are several independent single servers, for tests of a lock
// that spans deployments (package quorum): each is its own Cluster value,
// standalone, so a fault in one (Kill, Pause) never touches the others.
// A standalone server starts in a fraction of a second: three cost less
// than one 3+3 cluster.
type Deployments []*Cluster

// StartDeployments starts n standalone servers at once. On error the ones
// that started are closed.
func StartDeployments(ctx context.Context, n int, opt Options) (Deployments, error) {
	out := make(Deployments, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range out {
		wg.Go(func() { out[i], errs[i] = StartStandalone(ctx, opt) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		_ = out.Close()
		return nil, err
	}
	return out, nil
}

// Close closes every deployment.
func (d Deployments) Close() error {
	var errs []error
	for _, c := range d {
		if c != nil {
			errs = append(errs, c.Close())
		}
	}
	return errors.Join(errs...)
}

// Node returns deployment i's server.
func (d Deployments) Node(i int) *Node { return d[i].Nodes()[0] }

// StartDeploymentsForTest is StartDeployments for one test, closed with it,
// with the skip-or-fail rule of StartForTest.
func StartDeploymentsForTest(tb testing.TB, n int, opt Options) Deployments {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	d, err := StartDeployments(ctx, n, opt)
	if err != nil {
		missing(tb, err)
		return nil
	}
	tb.Logf("redistest: %d deployments: %s", n, d[0].Describe(ctx))
	tb.Cleanup(func() {
		if err := d.Close(); err != nil {
			tb.Errorf("redistest: close: %v", err)
		}
	})
	return d
}

// MainDeployments is Main for a package whose tests share n standalone
// deployments (its examples, say): it starts them, stores them in *dst,
// runs the tests and closes them, with Main's rule when they cannot start.
// RequireDeployments hands them to a test.
func MainDeployments(m *testing.M, n int, opt Options, dst *Deployments) int {
	return mainWith(m, "Redis server", func(ctx context.Context) (func(context.Context) string, func() error, error) {
		d, err := StartDeployments(ctx, n, opt)
		if err != nil {
			*dst = Deployments{{startErr: err}}
			return nil, nil, err
		}
		*dst = d
		describe := func(ctx context.Context) string {
			return fmt.Sprintf("%d deployments: %s", n, d[0].Describe(ctx))
		}
		return describe, d.Close, nil
	})
}

// RequireDeployments returns d for a test that needs the package's
// deployments, skipping it (failing under CI=true) if they did not start.
func RequireDeployments(tb testing.TB, d Deployments) Deployments {
	tb.Helper()
	switch {
	case len(d) == 0:
		missing(tb, errNoMain)
	case d[0].startErr != nil:
		missing(tb, d[0].startErr)
	}
	return d
}
