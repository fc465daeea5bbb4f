package bench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"regexp"
	"slices"
	"strings"
	"time"

	"crypto/tls"

	goredis "github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/slotlock/slotlock/bench/latency"
	"github.com/slotlock/slotlock/internal/redistest"
)

// TTL is the lock expiry every contender asks for (rueidislock keeps its own
// 5 s validity, which it extends in the background).
const TTL = 30 * time.Second

// Env is the cluster the contenders run against and the tools around it:
// a cluster the harness started (NewEnv) or one the user already has
// (Attach).
type Env struct {
	// cluster is the harness's cluster, nil for an attached one.
	cluster *redistest.Cluster
	seeds   []string
	// prefix starts every key any contender writes; empty only on the
	// harness's own cluster, which is flushed between cells.
	prefix string
	// probe is a client of its own, never delayed: it reads lock keys
	// back (Check), reads INFO and cleans up, without touching any
	// contender's connections.
	probe   rueidis.Client
	nodes   []node
	masters []node
	// rtt is the emulated round trip of the contenders' connections; see
	// WithRTT.
	rtt time.Duration
	// kind is the kind of lease of the cell being set up (Cell.Kind),
	// which the slotlock contenders build their Lockers for.
	kind string
	// Wire counts the chunks that went through delayed connections.
	Wire *latency.Stats
}

// node is one Redis server, talked to directly (never redirected).
type node struct {
	addr   string
	client rueidis.Client
}

// Addr is host:port as the cluster announces it.
func (n node) Addr() string { return n.addr }

// Info returns one INFO section.
func (n node) Info(ctx context.Context, section string) (string, error) {
	s, err := n.client.Do(ctx, n.client.B().Info().Section(section).Build()).ToString()
	if err != nil {
		return "", fmt.Errorf("INFO %s on %s: %w", section, n.addr, err)
	}
	return s, nil
}

// NewEnv prepares a benchmark environment on a running harness cluster,
// which it may flush between cells.
func NewEnv(ctx context.Context, c *redistest.Cluster) (*Env, error) {
	e := &Env{cluster: c, seeds: c.Addrs(), Wire: &latency.Stats{}}
	probe, err := c.Client()
	if err != nil {
		return nil, err
	}
	return e, e.discover(ctx, probe)
}

// prefixRE keeps prefixes free of braces (slotlock's own hash tags follow
// them) and of SCAN's glob characters.
var prefixRE = regexp.MustCompile(`^[A-Za-z0-9:_.\-]+$`)

// ErrPrefixInUse means an attached cluster already holds keys under the
// benchmark's prefix: they may be someone's data, and the benchmark would
// delete them afterwards.
var ErrPrefixInUse = errors.New("bench: the cluster already holds keys under the prefix")

// Attach prepares a benchmark environment on a cluster the user already
// has. Every key the contenders write starts with prefix, and so do the
// lock keys of the libraries (their prefixes are set below it); cleaning
// up deletes those keys and nothing else. Attach refuses a prefix under
// which any master already holds a key (ErrPrefixInUse).
func Attach(ctx context.Context, addrs []string, prefix string) (*Env, error) {
	if !prefixRE.MatchString(prefix) {
		return nil, fmt.Errorf("bench: prefix %q: want letters, digits and :_.- only", prefix)
	}
	e, err := connect(ctx, addrs, prefix)
	if err != nil {
		return nil, err
	}
	for _, m := range e.masters {
		key, err := firstKey(ctx, m, prefix)
		if err != nil {
			e.Close()
			return nil, err
		}
		if key != "" {
			e.Close()
			return nil, fmt.Errorf("%w %q: %s holds %q (pick another -prefix, or delete them yourself)", ErrPrefixInUse, prefix, m.addr, key)
		}
	}
	return e, nil
}

// connect prepares an environment on the cluster at addrs as it is.
func connect(ctx context.Context, addrs []string, prefix string) (*Env, error) {
	e := &Env{seeds: addrs, prefix: prefix, Wire: &latency.Stats{}}
	probe, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: addrs, DisableCache: true})
	if err != nil {
		return nil, fmt.Errorf("bench: connect to %v: %w", addrs, err)
	}
	return e, e.discover(ctx, probe)
}

// discover finds every node of the cluster and which are masters.
func (e *Env) discover(ctx context.Context, probe rueidis.Client) error {
	e.probe = probe
	for addr, c := range probe.Nodes() {
		e.nodes = append(e.nodes, node{addr: addr, client: c})
	}
	slices.SortFunc(e.nodes, func(a, b node) int { return strings.Compare(a.addr, b.addr) })
	for _, n := range e.nodes {
		text, err := n.Info(ctx, "replication")
		if err != nil {
			e.Close()
			return fmt.Errorf("bench: %w", err)
		}
		if strings.Contains(text, "role:master") {
			e.masters = append(e.masters, n)
		}
	}
	if len(e.masters) == 0 {
		e.Close()
		return fmt.Errorf("bench: no master among %d nodes", len(e.nodes))
	}
	return nil
}

// Close closes the environment's own client; the cluster is the caller's.
func (e *Env) Close() { e.probe.Close() }

// Cluster returns the harness's cluster, or nil for an attached one.
func (e *Env) Cluster() *redistest.Cluster { return e.cluster }

// Shape is "3 masters + 3 replicas".
func (e *Env) Shape() string {
	return fmt.Sprintf("%d masters + %d replicas", len(e.masters), len(e.nodes)-len(e.masters))
}

// Seeds are the addresses clients start from.
func (e *Env) Seeds() []string { return e.seeds }

// WithRTT returns the environment seen through connections that add rtt
// of round trip (latency.Conn); it shares everything else with e, and only
// e is closed.
func (e *Env) WithRTT(rtt time.Duration) *Env {
	c := *e
	c.rtt = rtt
	return &c
}

func (e *Env) dialer() latency.Dialer { return latency.Dialer{RTT: e.rtt, Stats: e.Wire} }

// clientOption is what every contender's rueidis client starts from: the
// seeds, and the delaying dialer when there is a round trip to emulate.
func (e *Env) clientOption() rueidis.ClientOption {
	o := rueidis.ClientOption{InitAddress: e.seeds}
	if e.rtt > 0 {
		d := e.dialer()
		o.DialCtxFn = func(ctx context.Context, addr string, nd *net.Dialer, _ *tls.Config) (net.Conn, error) {
			return d.DialWith(ctx, nd, "tcp", addr)
		}
	}
	return o
}

// client returns a new rueidis client, as an application would build it,
// behind the environment's round trip.
func (e *Env) client() (rueidis.Client, error) {
	if e.cluster != nil {
		// The harness's client options (seeds that are up, standalone
		// servers), with the dialer on top.
		o := e.clientOption()
		return e.cluster.Client(func(co *rueidis.ClientOption) { co.DialCtxFn = o.DialCtxFn })
	}
	c, err := rueidis.NewClient(e.clientOption())
	if err != nil {
		return nil, fmt.Errorf("bench: client for %v: %w", e.seeds, err)
	}
	return c, nil
}

// goRedis returns a go-redis cluster client behind the environment's
// round trip.
func (e *Env) goRedis() *goredis.ClusterClient {
	o := &goredis.ClusterOptions{Addrs: e.seeds}
	if e.rtt > 0 {
		o.Dialer = e.dialer().DialContext
	}
	return goredis.NewClusterClient(o)
}

// reset deletes every key the benchmark may have written, so that each
// cell starts from an empty keyspace whatever the previous cell left
// behind: FLUSHALL on the harness's cluster, the prefix's keys elsewhere.
func (e *Env) reset(ctx context.Context) error {
	if e.prefix == "" && e.cluster != nil {
		if err := e.cluster.FlushAll(ctx); err != nil {
			return fmt.Errorf("reset: %w", err)
		}
		return nil
	}
	_, err := e.Cleanup(ctx)
	return err
}

// Cleanup deletes every key under the prefix on every master and returns
// how many it deleted. On the harness's cluster without a prefix it does
// nothing: that is reset's FLUSHALL.
func (e *Env) Cleanup(ctx context.Context) (int, error) {
	if e.prefix == "" {
		return 0, nil
	}
	total := 0
	for _, m := range e.masters {
		for cursor := uint64(0); ; {
			entry, err := m.client.Do(ctx, m.client.B().Scan().Cursor(cursor).Match(e.prefix+"*").Count(1000).Build()).AsScanEntry()
			if err != nil {
				return total, fmt.Errorf("cleanup: SCAN on %s: %w", m.addr, err)
			}
			if len(entry.Elements) > 0 {
				// One UNLINK per key: keys of several slots may not share
				// a command in cluster mode.
				cmds := make(rueidis.Commands, len(entry.Elements))
				for i, k := range entry.Elements {
					cmds[i] = m.client.B().Unlink().Key(k).Build()
				}
				for i, r := range m.client.DoMulti(ctx, cmds...) {
					if err := r.Error(); err != nil {
						return total, fmt.Errorf("cleanup: UNLINK %s on %s: %w", entry.Elements[i], m.addr, err)
					}
				}
				total += len(entry.Elements)
			}
			if cursor = entry.Cursor; cursor == 0 {
				break
			}
		}
	}
	return total, nil
}

// firstKey returns a key of m under prefix, or "".
func firstKey(ctx context.Context, m node, prefix string) (string, error) {
	for cursor := uint64(0); ; {
		entry, err := m.client.Do(ctx, m.client.B().Scan().Cursor(cursor).Match(prefix+"*").Count(1000).Build()).AsScanEntry()
		if err != nil {
			return "", fmt.Errorf("bench: SCAN on %s: %w", m.addr, err)
		}
		if len(entry.Elements) > 0 {
			return entry.Elements[0], nil
		}
		if cursor = entry.Cursor; cursor == 0 {
			return "", nil
		}
	}
}

// ServerCPU is the CPU time (user+sys) every node has used since it started.
func (e *Env) ServerCPU(ctx context.Context) (time.Duration, error) {
	var cpu time.Duration
	for _, n := range e.nodes {
		c, err := nodeCPU(ctx, n.Info)
		if err != nil {
			return 0, err
		}
		cpu += c
	}
	return cpu, nil
}

// RedisVersion is the server the first master says it is in INFO server,
// with its name: "redis 7.0.15", "valkey 8.0.1" (redistest.ParseServer).
func (e *Env) RedisVersion(ctx context.Context) (string, error) {
	text, err := e.masters[0].Info(ctx, "server")
	if err != nil {
		return "", err
	}
	srv, err := redistest.ParseServer(text)
	if err != nil {
		return "", fmt.Errorf("INFO server of %s: %w", e.masters[0].addr, err)
	}
	return srv.String(), nil
}
