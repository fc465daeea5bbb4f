package redistest

import (
	"strings"
	"testing"
)

// TestTLSCluster: with Options.TLS the cluster forms over TLS (bus and
// replication too, or the replicas would never link and formation would
// time out), a client with Cluster.TLSConfig reads and writes every
// master, CLUSTER SHARDS announces the TLS port, and a plain connection
// to any node gets no PONG. Mutation: dropping --port 0 from tlsArgs
// leaves the plain port open and fails the last check.
func TestTLSCluster(t *testing.T) {
	for _, b := range []Backend{BackendProcess, BackendDocker} {
		t.Run(string(b), func(t *testing.T) {
			backendOrSkip(t, b)
			ctx := testCtx(t)
			c := StartForTest(t, Options{Backend: b, TLS: true})
			if c.TLSConfig() == nil {
				t.Fatal("no TLS configuration")
			}
			cl := clusterClient(t, c)
			for i := range 30 {
				k := "tls:" + strings.Repeat("k", i)
				if err := cl.Do(ctx, cl.B().Set().Key(k).Value("v").Build()).Error(); err != nil {
					t.Fatal(err)
				}
			}
			shards, err := c.view(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if len(shards) != 3 {
				t.Fatalf("%d shards", len(shards))
			}
			for _, n := range c.nodes {
				if err := pingAddr(ctx, n.Addr(), c.TLSConfig()); err != nil {
					t.Errorf("TLS PING %s: %v", n.Addr(), err)
				}
				if err := pingAddr(ctx, n.Addr(), nil); err == nil {
					t.Errorf("node %s answers PING in clear", n.Addr())
				}
			}
		})
	}
}
