package redistest

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/redis/rueidis"
)

// nodeSpec is what a backend needs to run one node.
type nodeSpec struct {
	name      string
	port      int
	bus       int
	clustered bool
	extra     []string
	// tls, when set, makes the node serve TLS only; tlsDir is where the
	// node itself finds the files (set by the launcher: a host path, or
	// the container's).
	tls    *tlsMaterial
	tlsDir string
}

// tlsClient returns the client TLS configuration for the node, nil
// without TLS.
func (s nodeSpec) tlsClient() *tls.Config {
	if s.tls == nil {
		return nil
	}
	return s.tls.client
}

func (s nodeSpec) addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// serverArgs is the redis-server command line shared by both backends.
// Without persistence a killed node comes back empty, as after a real crash
// of a cache node; --repl-diskless-sync-delay 0 avoids the 5 s wait before a
// replica's first sync; debug commands let tests use DEBUG SLEEP and friends.
func serverArgs(spec nodeSpec, dir string) []string {
	args := []string{
		"--port", strconv.Itoa(spec.port),
		"--bind", "127.0.0.1",
		"--dir", dir,
		"--save", "",
		"--appendonly", "no",
		"--protected-mode", "no",
		"--enable-debug-command", "yes",
		"--repl-diskless-sync-delay", "0",
	}
	if spec.clustered {
		args = append(args,
			"--cluster-enabled", "yes",
			"--cluster-config-file", dir+"/nodes.conf",
			"--cluster-node-timeout", "5000",
			"--cluster-port", strconv.Itoa(spec.bus),
		)
	}
	if spec.tls != nil {
		args = append(args, tlsArgs(strconv.Itoa(spec.port), spec.tlsDir)...)
	}
	return append(args, spec.extra...)
}

// launcher is one backend: it runs nodes and owns what they share (a temp
// dir, a Docker client).
type launcher interface {
	launch(ctx context.Context, spec nodeSpec) (nodeRunner, error)
	close(ctx context.Context) error
	// source names what the nodes run: a binary or an image.
	source() string
}

// Cluster is a running Redis Cluster (or, from StartStandalone, a single
// server) on 127.0.0.1, with the fault injection that lock tests need.
// It is safe for concurrent use, but fault methods (Kill, Failover, MoveSlot)
// are meant to be called from one goroutine at a time.
type Cluster struct {
	backend    Backend
	standalone bool
	opt        Options
	launcher   launcher
	nodes      []*Node
	tls        *tlsMaterial // with Options.TLS

	// startErr is set on the placeholder that Main leaves when no cluster
	// could be started, so that Require can say why.
	startErr error

	closeOnce sync.Once
	closeErr  error
}

// Start runs a Redis Cluster of opt.Masters masters with opt.Replicas
// replicas each and returns only when it is ready (see WaitReady): every
// test can then lock right away instead of racing cluster formation.
func Start(ctx context.Context, opt Options) (*Cluster, error) {
	return start(ctx, opt, true)
}

// StartStandalone runs one redis-server without cluster mode, for tests that
// check the library also works against a plain server. Masters and Replicas
// are ignored.
func StartStandalone(ctx context.Context, opt Options) (*Cluster, error) {
	return start(ctx, opt, false)
}

func start(ctx context.Context, opt Options, clustered bool) (*Cluster, error) {
	opt = opt.withDefaults()
	choice, err := opt.resolveBackend(ctx)
	if err != nil {
		return nil, err
	}
	c, err := startOn(ctx, opt, clustered, choice.backend)
	switch {
	case err == nil || !choice.auto:
		return c, err
	case choice.backend == BackendDocker:
		// The engine answered but could not run the nodes (no image, no
		// host networking): processes still give the tests a cluster.
		c, perr := startOn(ctx, opt, clustered, BackendProcess)
		if perr == nil {
			return c, nil
		}
		return nil, fmt.Errorf("%w; and with processes: %w", err, perr)
	default:
		return nil, fmt.Errorf("redistest: %w, and %w", choice.noDocker, err)
	}
}

func startOn(ctx context.Context, opt Options, clustered bool, backend Backend) (*Cluster, error) {
	var (
		l   launcher
		err error
	)
	switch backend {
	case BackendDocker:
		l, err = newDockerLauncher(ctx)
	default:
		l, err = newProcessLauncher()
	}
	if err != nil {
		return nil, err
	}
	c := &Cluster{backend: backend, standalone: !clustered, opt: opt, launcher: l}
	if opt.TLS {
		if c.tls, err = newTLSMaterial(); err != nil {
			l.close(ctx)
			return nil, err
		}
	}
	n := 1
	if clustered {
		n = opt.Masters * (1 + opt.Replicas)
	}
	c.nodes = make([]*Node, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { c.nodes[i], errs[i] = c.launchNode(ctx, i, clustered) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		c.Close()
		return nil, fmt.Errorf("redistest: %s backend: %w", backend, err)
	}
	if clustered {
		err = c.form(ctx)
	} else {
		err = c.WaitReady(ctx)
	}
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("redistest: %s backend: %w", backend, err)
	}
	return c, nil
}

func (c *Cluster) launchNode(ctx context.Context, i int, clustered bool) (*Node, error) {
	for attempt := 1; ; attempt++ {
		leases, err := leasePorts(2)
		if err != nil {
			return nil, err
		}
		spec := nodeSpec{
			name:      fmt.Sprintf("node%d", i),
			port:      leases[0].port,
			bus:       leases[1].port,
			clustered: clustered,
			extra:     c.opt.ExtraArgs,
			tls:       c.tls,
		}
		run, err := c.launcher.launch(ctx, spec)
		if err != nil {
			for _, l := range leases {
				l.release()
			}
			if errors.Is(err, errPortTaken) && attempt < 5 {
				continue
			}
			return nil, err
		}
		return &Node{cluster: c, index: i, port: spec.port, bus: spec.bus, leases: leases, run: run}, nil
	}
}

// Close stops every node and removes their directories or containers. It is
// safe to call more than once and on a cluster that failed to start, so a
// test can always defer it.
func (c *Cluster) Close() error {
	if c == nil {
		return nil
	}
	c.closeOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		errs := make([]error, len(c.nodes))
		var wg sync.WaitGroup
		for i, n := range c.nodes {
			if n == nil {
				continue
			}
			wg.Go(func() {
				n.dropConn()
				if err := n.run.destroy(ctx); err != nil {
					errs[i] = fmt.Errorf("redistest: close node %s: %w", n, err)
				}
				for _, l := range n.leases {
					l.release()
				}
			})
		}
		wg.Wait()
		if c.launcher != nil {
			errs = append(errs, c.launcher.close(ctx))
		}
		c.tls.remove()
		c.closeErr = errors.Join(errs...)
	})
	return c.closeErr
}

// Backend says where the nodes run, for tests whose expectations differ
// (a docker pause freezes the container's processes through the cgroup
// freezer, SIGSTOP one process; neither stops the clock, so keys expire
// during either).
func (c *Cluster) Backend() Backend { return c.backend }

// Addrs lists every node, masters and replicas alike, as "127.0.0.1:port":
// what a client needs as seeds, whatever happened to the roles since start.
func (c *Cluster) Addrs() []string {
	out := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		out[i] = n.Addr()
	}
	return out
}

// Nodes lists every node in start-up order (masters first). Roles change
// with failovers: ask Masters or Replicas for the live ones.
func (c *Cluster) Nodes() []*Node { return append([]*Node(nil), c.nodes...) }

// liveNodes are the nodes the harness has not killed or paused: the ones
// expected to answer.
func (c *Cluster) liveNodes() []*Node {
	var out []*Node
	for _, n := range c.nodes {
		if n.getState() == nodeUp {
			out = append(out, n)
		}
	}
	return out
}

// Client returns a new rueidis client for the cluster, seeded with every
// running node so that it connects even while some are down; a standalone
// cluster gets a single-server client. opts adjust the option before the
// client is made (e.g. DisableCache). The caller closes it.
func (c *Cluster) Client(opts ...func(*rueidis.ClientOption)) (rueidis.Client, error) {
	if c.startErr != nil {
		return nil, c.startErr
	}
	var seeds []string
	for _, n := range c.liveNodes() {
		seeds = append(seeds, n.Addr())
	}
	if len(seeds) == 0 {
		seeds = c.Addrs()
	}
	o := rueidis.ClientOption{InitAddress: seeds, ForceSingleClient: c.standalone, TLSConfig: c.TLSConfig()}
	for _, f := range opts {
		f(&o)
	}
	cl, err := rueidis.NewClient(o)
	if err != nil {
		return nil, fmt.Errorf("redistest: client for %v: %w", seeds, err)
	}
	return cl, nil
}

// TLSConfig returns a client TLS configuration that trusts the cluster's
// certificate (a new copy each call), or nil when the cluster was not
// started with Options.TLS.
func (c *Cluster) TLSConfig() *tls.Config {
	if c.tls == nil {
		return nil
	}
	return c.tls.client.Clone()
}

// TLSCAFile returns the path of the PEM file of the CA that signed the
// cluster's certificate, for clients configured by file (the command-line
// tool's --tls-ca), or "" when the cluster was not started with
// Options.TLS.
func (c *Cluster) TLSCAFile() string {
	if c.tls == nil {
		return ""
	}
	return c.tls.files[tlsCAFile]
}

// FlushAll empties every master (replicas follow), so that test cases
// sharing one cluster start from no keys.
func (c *Cluster) FlushAll(ctx context.Context) error {
	masters := c.nodes
	if !c.standalone {
		var err error
		if masters, err = c.Masters(ctx); err != nil {
			return err
		}
	}
	for _, m := range masters {
		if err := m.Do(ctx, "FLUSHALL").Error(); err != nil {
			return fmt.Errorf("redistest: FLUSHALL on %s: %w", m.Addr(), err)
		}
	}
	return nil
}
