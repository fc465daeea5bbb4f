package bench

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/redis/rueidis"

	"github.com/slotlock/slotlock/internal/redistest"
)

// TTL is the lock expiry every contender asks for (rueidislock keeps its own
// 5 s validity, which it extends in the background).
const TTL = 30 * time.Second

// Env is the cluster the contenders run against and the tools around it.
type Env struct {
	cluster *redistest.Cluster
	// probe is a client of its own for Check: it reads lock keys without
	// touching any contender's connections.
	probe   rueidis.Client
	masters []*redistest.Node
}

// NewEnv prepares a benchmark environment on a running cluster.
func NewEnv(ctx context.Context, c *redistest.Cluster) (*Env, error) {
	masters, err := c.Masters(ctx)
	if err != nil {
		return nil, err
	}
	probe, err := c.Client()
	if err != nil {
		return nil, err
	}
	return &Env{cluster: c, probe: probe, masters: masters}, nil
}

// Close closes the environment's own client; the cluster is the caller's.
func (e *Env) Close() { e.probe.Close() }

// Cluster returns the cluster under test.
func (e *Env) Cluster() *redistest.Cluster { return e.cluster }

// Masters returns the slot-owning masters as read at start.
func (e *Env) Masters() []*redistest.Node { return e.masters }

// client returns a new rueidis client with the harness's defaults: what an
// application would build.
func (e *Env) client() (rueidis.Client, error) { return e.cluster.Client() }

// reset deletes every key, so that each cell starts from an empty keyspace
// whatever the previous cell left behind.
func (e *Env) reset(ctx context.Context) error {
	if err := e.cluster.FlushAll(ctx); err != nil {
		return fmt.Errorf("reset: %w", err)
	}
	return nil
}

// ServerCPU is the CPU time (user+sys) every node has used since it started.
func (e *Env) ServerCPU(ctx context.Context) (time.Duration, error) {
	var cpu time.Duration
	for _, n := range e.cluster.Nodes() {
		c, err := nodeCPU(ctx, n.Info)
		if err != nil {
			return 0, err
		}
		cpu += c
	}
	return cpu, nil
}

// RedisVersion is what the first master says in INFO server.
func (e *Env) RedisVersion(ctx context.Context) (string, error) {
	text, err := e.masters[0].Info(ctx, "server")
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(text, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
			return v, nil
		}
	}
	return "", fmt.Errorf("no redis_version in INFO server of %s", e.masters[0].Addr())
}
