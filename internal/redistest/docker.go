package redistest

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
	"github.com/testcontainers/testcontainers-go"
	tclog "github.com/testcontainers/testcontainers-go/log"
	"github.com/testcontainers/testcontainers-go/wait"
)

// Labels on every container of the harness: labelHarness finds them all,
// labelCluster one cluster's, and labelPID with labelHost tell whether the
// test binary that made a container is still alive.
const (
	labelHarness = "slotlock.harness"
	labelCluster = "slotlock.cluster"
	labelPID     = "slotlock.pid"
	labelHost    = "slotlock.host"
)

// prepareDockerEnv sets what testcontainers must know before its first call
// (it reads its configuration once per process):
//   - Ryuk off: it is an image to pull, and CI has no registry. Only the exact
//     string "true" turns it off, so truthy spellings are normalised.
//   - Host override to loopback: on a machine with /.dockerenv testcontainers
//     would resolve Host() to a gateway address. The harness never dials
//     Host() (nodes use host networking), but nothing else should either.
func prepareDockerEnv() {
	const ryuk = "TESTCONTAINERS_RYUK_DISABLED"
	if v, err := strconv.ParseBool(os.Getenv(ryuk)); os.Getenv(ryuk) == "" || (err == nil && v) {
		os.Setenv(ryuk, "true")
	}
	if os.Getenv("TESTCONTAINERS_HOST_OVERRIDE") == "" {
		os.Setenv("TESTCONTAINERS_HOST_OVERRIDE", "127.0.0.1")
	}
}

// dockerAvailable reports whether a Docker engine answers within two
// seconds: long enough for a local socket, short enough that a machine
// without Docker does not slow every test binary down.
func dockerAvailable(ctx context.Context) error {
	prepareDockerEnv()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	cli, err := testcontainers.NewDockerClientWithOpts(ctx)
	if err != nil {
		return fmt.Errorf("no Docker engine: %w", err)
	}
	defer cli.Close()
	if _, err := cli.Ping(ctx, client.PingOptions{}); err != nil {
		return fmt.Errorf("no Docker engine: %w", err)
	}
	return nil
}

// dockerLauncher runs one container per node from one image, all with host
// networking so that nodes bind and announce 127.0.0.1 like processes do
// and clients need no address mapping.
type dockerLauncher struct {
	cli     *testcontainers.DockerClient
	image   string
	cluster string
}

func (l *dockerLauncher) source() string { return "image " + l.image }

func newDockerLauncher(ctx context.Context) (*dockerLauncher, error) {
	if err := dockerAvailable(ctx); err != nil {
		return nil, err
	}
	cli, err := testcontainers.NewDockerClientWithOpts(ctx)
	if err != nil {
		return nil, fmt.Errorf("redistest: docker client: %w", err)
	}
	reapOrphans(ctx, cli)
	image, err := redisImage(ctx, cli)
	if err != nil {
		cli.Close()
		return nil, err
	}
	id := make([]byte, 6)
	rand.Read(id)
	return &dockerLauncher{cli: cli, image: image, cluster: hex.EncodeToString(id)}, nil
}

func (l *dockerLauncher) launch(ctx context.Context, spec nodeSpec) (nodeRunner, error) {
	host, _ := os.Hostname()
	req := testcontainers.ContainerRequest{
		Image: l.image,
		Name:  fmt.Sprintf("slotlock-%s-%d", l.cluster, spec.port),
		Cmd:   append([]string{"redis-server"}, serverArgs(spec, "/data")...),
		Files: tlsFiles(spec),
		Labels: map[string]string{
			labelHarness: "1",
			labelCluster: l.cluster,
			labelPID:     strconv.Itoa(os.Getpid()),
			labelHost:    host,
		},
		// Logs only: wait.ForListeningPort runs /bin/sh in the container,
		// which the scratch image does not have. The host-side PING below
		// is the real check.
		WaitingFor: wait.ForLog("Ready to accept connections").WithStartupTimeout(30 * time.Second),
		HostConfigModifier: func(hc *container.HostConfig) {
			hc.NetworkMode = "host"
		},
	}
	ctr, err := testcontainers.GenericContainer(ctx, testcontainers.GenericContainerRequest{
		ContainerRequest: req,
		Started:          true,
		// Six containers per cluster times five lines each would bury a
		// failing test's output; errors below carry the node's own log.
		Logger: tclog.NewNoopLogger(),
	})
	r := &containerRunner{cli: l.cli, ctr: ctr, addr: spec.addr(), tls: spec.tlsClient()}
	if err == nil {
		err = waitPing(ctx, spec.addr(), r.tls, 20*time.Second, nil)
	}
	if err != nil {
		if ctr != nil && strings.Contains(r.logTail(ctx), "Address already in use") {
			err = fmt.Errorf("redistest: node %s: %w", spec.addr(), errPortTaken)
		} else if ctr != nil {
			err = fmt.Errorf("redistest: container for node %s: %w; log ends:\n%s", spec.addr(), err, r.logTail(ctx))
		} else {
			err = fmt.Errorf("redistest: container for node %s: %w", spec.addr(), err)
		}
		if ctr != nil {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			r.destroy(cctx)
			cancel()
		}
		return nil, err
	}
	return r, nil
}

func (l *dockerLauncher) close(ctx context.Context) error {
	return l.cli.Close()
}

// containerRunner is one node's container. The container (and the
// nodes.conf in its file system) outlives kills; only destroy removes it.
type containerRunner struct {
	cli  *testcontainers.DockerClient
	ctr  testcontainers.Container
	addr string
	tls  *tls.Config // nil without TLS
}

// tlsFiles copies the TLS files into the container's /data, where
// serverArgs points the server (spec.tlsDir).
func tlsFiles(spec nodeSpec) []testcontainers.ContainerFile {
	if spec.tls == nil {
		return nil
	}
	var out []testcontainers.ContainerFile
	for name, p := range spec.tls.files {
		out = append(out, testcontainers.ContainerFile{HostFilePath: p, ContainerFilePath: "/data/" + name, FileMode: 0o644})
	}
	return out
}

func (r *containerRunner) id() string { return r.ctr.GetContainerID() }

func (r *containerRunner) String() string {
	id := r.id()
	if len(id) > 12 {
		id = id[:12]
	}
	return "container " + id
}

func (r *containerRunner) logTail(ctx context.Context) string {
	rc, err := r.ctr.Logs(ctx)
	if err != nil {
		return ""
	}
	defer rc.Close()
	b, _ := io.ReadAll(rc)
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(bytes.TrimSpace(b))
}

func (r *containerRunner) restart(ctx context.Context) error {
	if err := r.ctr.Start(ctx); err != nil {
		return err
	}
	return waitPing(ctx, r.addr, r.tls, 20*time.Second, nil)
}

func (r *containerRunner) kill(ctx context.Context) error {
	if _, err := r.cli.ContainerKill(ctx, r.id(), client.ContainerKillOptions{Signal: "KILL"}); err != nil {
		return err
	}
	// The kill request returns before the process is reaped; wait, so that
	// the port is free and the node's memory surely gone.
	res := r.cli.ContainerWait(ctx, r.id(), client.ContainerWaitOptions{Condition: container.WaitConditionNotRunning})
	select {
	case <-res.Result:
		return nil
	case err := <-res.Error:
		return err
	}
}

func (r *containerRunner) pause(ctx context.Context) error {
	_, err := r.cli.ContainerPause(ctx, r.id(), client.ContainerPauseOptions{})
	return err
}

func (r *containerRunner) resume(ctx context.Context) error {
	_, err := r.cli.ContainerUnpause(ctx, r.id(), client.ContainerUnpauseOptions{})
	return err
}

func (r *containerRunner) destroy(ctx context.Context) error {
	// Terminate stops (a zero timeout means SIGKILL, which also ends a
	// paused container) and force-removes the container, and closes the
	// Docker connection testcontainers keeps for it.
	err := r.ctr.Terminate(ctx, testcontainers.StopTimeout(0))
	if err != nil && !isNotFound(err) {
		return err
	}
	return nil
}

func isNotFound(err error) bool {
	return err != nil && strings.Contains(strings.ToLower(err.Error()), "no such container")
}

// reapOrphans removes containers that a crashed test binary of this machine
// left behind: labelled by the harness, with this host name, and a pid that
// no longer runs. The host name guards against removing the containers of a
// test run in another container that shares the engine (its pids mean
// nothing here). Failures are ignored: a leftover only costs its memory.
func reapOrphans(ctx context.Context, cli *testcontainers.DockerClient) {
	host, _ := os.Hostname()
	list, err := cli.ContainerList(ctx, client.ContainerListOptions{
		All:     true,
		Filters: make(client.Filters).Add("label", labelHarness+"=1", labelHost+"="+host),
	})
	if err != nil {
		return
	}
	for _, c := range list.Items {
		pid, err := strconv.Atoi(c.Labels[labelPID])
		if err != nil || pidAlive(pid) {
			continue
		}
		cli.ContainerRemove(ctx, c.ID, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
	}
}

func pidAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
