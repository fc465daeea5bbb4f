package redistest

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/rueidis"
)

// nodeRunner is what a backend does to one node. Each method returns when
// the effect is real (the process is gone, the container is frozen), so that
// a test never races its own fault injection.
type nodeRunner interface {
	// restart starts the node again after kill, with its data directory and
	// nodes.conf intact, and returns once it answers PING.
	restart(ctx context.Context) error
	kill(ctx context.Context) error
	pause(ctx context.Context) error
	resume(ctx context.Context) error
	// destroy ends the node for good and removes what it left behind.
	destroy(ctx context.Context) error
	// String names the process or container, for error messages.
	String() string
}

// errPortTaken says a node could not bind its port; the start-up retries with
// other ports, since the check in leasePorts cannot rule out a race with
// programs outside the harness.
var errPortTaken = errors.New("port already in use")

type nodeState int

const (
	nodeUp nodeState = iota
	nodeKilled
	nodePaused
)

// Node is one redis-server of a Cluster. Its address never changes, even
// across Kill and Restart, so tests can hold on to it through faults.
type Node struct {
	cluster *Cluster
	index   int
	port    int
	bus     int
	leases  []*portLease
	run     nodeRunner

	// id is the cluster node ID; it survives restarts because nodes.conf
	// does. Empty for a standalone server.
	id string

	mu     sync.Mutex
	state  nodeState
	client rueidis.Client
}

// Addr is where the node listens and what it announces to the cluster, so it
// is also the address rueidis uses for it.
func (n *Node) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(n.port)) }

// ID is the node's cluster ID, the name other nodes and CLUSTER commands use
// for it (SETSLOT NODE, REPLICATE). Empty for a standalone server.
func (n *Node) ID() string { return n.id }

// String is for test logs: the address and what runs it.
func (n *Node) String() string {
	if n.run == nil {
		return n.Addr()
	}
	return n.Addr() + " (" + n.run.String() + ")"
}

// Do runs one command on exactly this node, never redirected, so that tests
// can look at a replica or at a master that no longer owns a slot.
//
// It goes through a single-node rueidis client per node (ForceSingleClient,
// no client-side cache, no retries), created on first use and dropped when
// the node is killed. Errors, including Redis errors such as MOVED, come back
// in the result; on a paused node the call lasts until ctx is done. Writes
// time out after 5 s (ConnWriteTimeout), so a DEBUG SLEEP longer than that
// sent through Do fails with an i/o timeout, though the node still sleeps.
func (n *Node) Do(ctx context.Context, args ...string) rueidis.RedisResult {
	cl, err := n.conn()
	if err != nil {
		return rueidis.NewErrorResult(err)
	}
	return cl.Do(ctx, cl.B().Arbitrary(args...).Build())
}

// Info returns INFO section as plain text. INFO replies are RESP3 verbatim
// strings, which rueidis returns with their "txt:" format prefix; Info drops
// it so that the first line parses like the others.
func (n *Node) Info(ctx context.Context, section string) (string, error) {
	s, err := infoText(n.Do(ctx, "INFO", section))
	if err != nil {
		return "", fmt.Errorf("redistest: INFO %s on %s: %w", section, n.Addr(), err)
	}
	return s, nil
}

// doMulti sends several commands in one round trip to this node.
func (n *Node) doMulti(ctx context.Context, cmds ...[]string) []rueidis.RedisResult {
	cl, err := n.conn()
	if err != nil {
		out := make([]rueidis.RedisResult, len(cmds))
		for i := range out {
			out[i] = rueidis.NewErrorResult(err)
		}
		return out
	}
	built := make(rueidis.Commands, len(cmds))
	for i, c := range cmds {
		built[i] = cl.B().Arbitrary(c...).Build()
	}
	return cl.DoMulti(ctx, built...)
}

func (n *Node) conn() (rueidis.Client, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.client != nil {
		return n.client, nil
	}
	if n.state == nodeKilled {
		return nil, fmt.Errorf("redistest: node %s is killed", n.Addr())
	}
	cl, err := rueidis.NewClient(rueidis.ClientOption{
		InitAddress:       []string{n.Addr()},
		ForceSingleClient: true,
		DisableCache:      true,
		DisableRetry:      true,
		Dialer:            net.Dialer{Timeout: 2 * time.Second},
		ConnWriteTimeout:  5 * time.Second,
		TLSConfig:         n.cluster.TLSConfig(),
	})
	if err != nil {
		return nil, fmt.Errorf("redistest: connect to node %s: %w", n.Addr(), err)
	}
	n.client = cl
	return cl, nil
}

func (n *Node) dropConn() {
	n.mu.Lock()
	cl := n.client
	n.client = nil
	n.mu.Unlock()
	if cl != nil {
		cl.Close()
	}
}

func (n *Node) setState(s nodeState) {
	n.mu.Lock()
	n.state = s
	n.mu.Unlock()
}

func (n *Node) getState() nodeState {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.state
}

// Role asks the node itself (ROLE), because after a failover or a restart
// the start-up plan no longer says who is master. It returns "master" or
// "replica".
func (n *Node) Role(ctx context.Context) (string, error) {
	arr, err := n.Do(ctx, "ROLE").ToArray()
	if err != nil {
		return "", fmt.Errorf("redistest: ROLE on %s: %w", n.Addr(), err)
	}
	if len(arr) == 0 {
		return "", fmt.Errorf("redistest: ROLE on %s: empty reply", n.Addr())
	}
	role, err := arr[0].ToString()
	if err != nil {
		return "", fmt.Errorf("redistest: ROLE on %s: %w", n.Addr(), err)
	}
	switch role {
	case "master":
		return "master", nil
	case "slave", "replica":
		return "replica", nil
	default:
		return role, nil
	}
}

// Kill ends the node at once (SIGKILL, or a container kill), the way a crash
// does: no shutdown, and its memory is lost since the harness runs without
// persistence. Its nodes.conf stays, so Restart brings back the same node.
func (n *Node) Kill() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if n.getState() == nodeKilled {
		return nil
	}
	err := n.run.kill(ctx)
	n.setState(nodeKilled)
	n.dropConn()
	if err != nil {
		return fmt.Errorf("redistest: kill node %s: %w", n, err)
	}
	return nil
}

// Restart starts a killed node again on the same port with the same
// nodes.conf, so it rejoins as the same cluster member (as a replica if its
// slots were failed over meanwhile). It returns once the node answers PING;
// call Cluster.WaitReady to wait for the cluster to absorb it.
func (n *Node) Restart(ctx context.Context) error {
	if n.getState() != nodeKilled {
		return fmt.Errorf("redistest: restart node %s: it was not killed", n.Addr())
	}
	if err := n.run.restart(ctx); err != nil {
		return fmt.Errorf("redistest: restart node %s: %w", n, err)
	}
	n.setState(nodeUp)
	return nil
}

// Pause freezes the node (SIGSTOP, or docker pause): its sockets stay open
// but nothing answers, which is how a long GC pause or a stalled VM looks to
// the cluster and to clients. A paused node is left out of WaitReady.
func (n *Node) Pause() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	switch n.getState() {
	case nodePaused:
		return nil
	case nodeKilled:
		return fmt.Errorf("redistest: pause node %s: it is killed", n.Addr())
	}
	if err := n.run.pause(ctx); err != nil {
		return fmt.Errorf("redistest: pause node %s: %w", n, err)
	}
	n.setState(nodePaused)
	return nil
}

// Resume lets a paused node run again; it picks up where it stopped, which
// may be with a view of the cluster that is seconds old.
func (n *Node) Resume() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if n.getState() != nodePaused {
		return nil
	}
	if err := n.run.resume(ctx); err != nil {
		return fmt.Errorf("redistest: resume node %s: %w", n, err)
	}
	n.setState(nodeUp)
	return nil
}

// pingAddr sends PING over a fresh connection. Start-up and Restart use it
// instead of a rueidis client so that a node that is still coming up is not
// left with a client in a broken state.
func pingAddr(ctx context.Context, addr string, cfg *tls.Config) error {
	d := net.Dialer{Timeout: time.Second}
	var (
		conn net.Conn
		err  error
	)
	if cfg != nil {
		conn, err = (&tls.Dialer{NetDialer: &d, Config: cfg}).DialContext(ctx, "tcp", addr)
	} else {
		conn, err = d.DialContext(ctx, "tcp", addr)
	}
	if err != nil {
		return err
	}
	defer conn.Close()
	deadline := time.Now().Add(time.Second)
	if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
		deadline = dl
	}
	conn.SetDeadline(deadline)
	if _, err := conn.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return err
	}
	if !strings.HasPrefix(line, "+PONG") {
		return fmt.Errorf("PING: %s", strings.TrimSpace(line))
	}
	return nil
}

// waitPing polls until addr answers PING, exited reports that the node died
// (then its error is returned at once), or the time is up.
func waitPing(ctx context.Context, addr string, cfg *tls.Config, limit time.Duration, exited func() error) error {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	var last error
	for {
		if exited != nil {
			if err := exited(); err != nil {
				return err
			}
		}
		if last = pingAddr(ctx, addr, cfg); last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s does not answer PING after %s: %w", addr, limit, last)
		case <-time.After(20 * time.Millisecond):
		}
	}
}
