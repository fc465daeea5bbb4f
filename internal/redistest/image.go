package redistest

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/moby/moby/client"
	"github.com/testcontainers/testcontainers-go"
	tclog "github.com/testcontainers/testcontainers-go/log"
)

// officialImage is what a developer with a registry naturally has.
const officialImage = "redis:7"

// scratchRepo names the image built from this machine's own Redis binaries
// when no Redis image can be pulled (CI has no registry).
const scratchRepo = "slotlock-redis-scratch"

// redisImage picks the image for the docker backend, cheapest first:
//  1. $SLOTLOCK_REDIS_IMAGE, pulled by testcontainers if missing: the
//     developer asked for it;
//  2. with $SLOTLOCK_REDIS_SERVER, the scratch image of that binary, built
//     if missing, and nothing else (the developer asked for that server);
//  3. redis:7 if it is already local;
//  4. the scratch image if it is already built;
//  5. the scratch image, built now from the host's redis-server, when this
//     is a Linux machine with Redis binaries: no network needed;
//  6. a pull of redis:7 with a short timeout (a laptop whose Redis binaries
//     cannot go in a Linux image).
//
// Building before pulling keeps test runs off the network: a failed pull on
// a machine without a registry costs its timeout in every test binary, and a
// successful one needs traffic beyond the loopback the tests live on.
func redisImage(ctx context.Context, cli *testcontainers.DockerClient) (string, error) {
	img, server := os.Getenv(EnvImage), os.Getenv(EnvServer)
	switch {
	case img != "" && server != "":
		return "", fmt.Errorf("redistest: both %s=%q and %s=%q are set: they name different servers; unset one", EnvImage, img, EnvServer, server)
	case img != "":
		return img, nil
	case server != "":
		tag, err := scratchTag(ctx)
		if err != nil {
			return "", err
		}
		return ensureScratchImage(ctx, cli, tag)
	}
	if imagePresent(ctx, cli, officialImage) {
		return officialImage, nil
	}
	tag, buildErr := scratchTag(ctx)
	if buildErr == nil {
		return ensureScratchImage(ctx, cli, tag)
	}
	pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := pullImage(pctx, cli, officialImage); err != nil {
		return "", fmt.Errorf("redistest: no Redis image: %s is not local, cannot build one from this machine (%v), and pulling failed: %w", officialImage, buildErr, err)
	}
	return officialImage, nil
}

func imagePresent(ctx context.Context, cli *testcontainers.DockerClient, ref string) bool {
	_, err := cli.ImageInspect(ctx, ref)
	return err == nil
}

func pullImage(ctx context.Context, cli *testcontainers.DockerClient, ref string) error {
	resp, err := cli.ImagePull(ctx, ref, client.ImagePullOptions{})
	if err != nil {
		return err
	}
	defer resp.Close()
	return resp.Wait(ctx)
}

// scratchTag is the tag of the scratch image for the host's server binary:
// its name, version and a digest of its content, so that another server,
// another version, or another build of the same version (a Valkey built from
// a later commit, say) gets an image of its own.
func scratchTag(ctx context.Context) (string, error) {
	if runtime.GOOS != "linux" {
		return "", errors.New("host binaries are not Linux binaries")
	}
	server, err := redisServerPath()
	if err != nil {
		return "", err
	}
	name, v, err := redisVersion(ctx, server)
	if err != nil {
		return "", err
	}
	data, err := os.ReadFile(server)
	if err != nil {
		return "", fmt.Errorf("redistest: read %s: %w", server, err)
	}
	sum := sha256.Sum256(data)
	return scratchRepo + ":" + name + "-" + v + "-" + hex.EncodeToString(sum[:6]), nil
}

// ensureScratchImage builds the scratch image unless it exists. Test
// binaries started together by `go test ./...` take an exclusive file lock
// around check-and-build, so the image is built once; a second build would
// be harmless (same content, same tag) but slow.
func ensureScratchImage(ctx context.Context, cli *testcontainers.DockerClient, ref string) (string, error) {
	if imagePresent(ctx, cli, ref) {
		return ref, nil
	}
	if err := os.MkdirAll(cacheDir(), 0o755); err != nil {
		return "", fmt.Errorf("redistest: cache dir: %w", err)
	}
	lock, err := os.OpenFile(filepath.Join(cacheDir(), "image-build.lock"), os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		return "", fmt.Errorf("redistest: image build lock: %w", err)
	}
	defer lock.Close()
	if err := flockContext(ctx, lock); err != nil {
		return "", fmt.Errorf("redistest: image build lock: %w", err)
	}
	if imagePresent(ctx, cli, ref) {
		return ref, nil
	}
	archive, err := scratchContext()
	if err != nil {
		return "", err
	}
	repo, tag, _ := strings.Cut(ref, ":")
	provider, err := testcontainers.NewDockerProvider(testcontainers.WithLogger(tclog.NewNoopLogger()))
	if err != nil {
		return "", fmt.Errorf("redistest: docker provider: %w", err)
	}
	defer provider.Close()
	bctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	_, err = provider.BuildImage(bctx, &testcontainers.ContainerRequest{
		FromDockerfile: testcontainers.FromDockerfile{
			ContextArchive: bytes.NewReader(archive),
			Repo:           repo,
			Tag:            tag,
			// Without KeepImage, terminating the first container would
			// delete the image under every other node.
			KeepImage: true,
		},
	})
	if err != nil {
		return "", fmt.Errorf("redistest: build %s: %w", ref, err)
	}
	return ref, nil
}

// flockContext takes an exclusive lock on f, giving up when ctx ends.
func flockContext(ctx context.Context, f *os.File) error {
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

const scratchDockerfile = `FROM scratch
COPY rootfs/ /
ENV PATH=/usr/local/bin:/usr/bin:/bin
WORKDIR /data
CMD ["redis-server"]
`

// scratchContext is the build context of the scratch image: redis-server,
// redis-cli and every shared library ldd lists for them, each at the same
// absolute path as on the host (the dynamic loader included), and an empty
// /data for the node's files. Nothing else: no shell, no /etc.
func scratchContext() ([]byte, error) {
	server, err := redisServerPath()
	if err != nil {
		return nil, err
	}
	files := map[string]string{"/usr/local/bin/redis-server": server} // image path -> host path
	bins := []string{server}
	if cli, err := redisCLIPath(); err == nil {
		files["/usr/local/bin/redis-cli"] = cli
		bins = append(bins, cli)
	}
	for _, b := range bins {
		libs, err := sharedLibs(b)
		if err != nil {
			return nil, err
		}
		for _, l := range libs {
			files[l] = l
		}
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	add := func(hdr *tar.Header, body []byte) error {
		hdr.ModTime = time.Unix(0, 0)
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		_, err := tw.Write(body)
		return err
	}
	if err := add(&tar.Header{Name: "Dockerfile", Mode: 0o644, Size: int64(len(scratchDockerfile))}, []byte(scratchDockerfile)); err != nil {
		return nil, err
	}
	for _, d := range []string{"rootfs/", "rootfs/data/", "rootfs/tmp/"} {
		if err := add(&tar.Header{Name: d, Typeflag: tar.TypeDir, Mode: 0o1777}, nil); err != nil {
			return nil, err
		}
	}
	for dst, src := range files {
		body, err := os.ReadFile(src) // follows symlinks: the image gets the file itself
		if err != nil {
			return nil, fmt.Errorf("redistest: scratch image: %w", err)
		}
		hdr := &tar.Header{Name: "rootfs" + dst, Mode: 0o755, Size: int64(len(body))}
		if err := add(hdr, body); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

var lddPathRE = regexp.MustCompile(`(?m)(?:=>\s+|^\s+)(/\S+)\s+\(0x`)

// sharedLibs lists the absolute paths ldd reports for bin, the loader
// included.
func sharedLibs(bin string) ([]string, error) {
	out, err := exec.Command("ldd", bin).Output()
	if err != nil {
		return nil, fmt.Errorf("redistest: ldd %s: %w", bin, err)
	}
	var libs []string
	for _, m := range lddPathRE.FindAllSubmatch(out, -1) {
		libs = append(libs, string(m[1]))
	}
	if len(libs) == 0 {
		return nil, fmt.Errorf("redistest: ldd %s lists no libraries: %s", bin, out)
	}
	return libs, nil
}
