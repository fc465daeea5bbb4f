package redistest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"time"
)

// errNoRedis is what both backends report when this machine has no Redis
// binaries: the process backend runs them, the scratch image is built from
// them. The message tells a developer the one command that fixes it.
var errNoRedis = errors.New("no redis-server on PATH and no redis-check-rdb in PATH or /usr/bin: run make test, or apt-get install redis-tools")

// redisServerPath returns a redis-server binary of this machine.
//
// Debian's redis-tools ships only redis-check-rdb, which is the whole server:
// it picks its mode from the name it was started as. A copy named
// redis-server therefore runs the server. The copy lives in a per-content
// directory of the user cache, written under a temporary name and renamed,
// so test binaries started in parallel by `go test ./...` never see a half
// written file.
func redisServerPath() (string, error) {
	if p, err := exec.LookPath("redis-server"); err == nil {
		return p, nil
	}
	src, err := exec.LookPath("redis-check-rdb")
	if err != nil {
		src = "/usr/bin/redis-check-rdb"
		if _, err := os.Stat(src); err != nil {
			return "", errNoRedis
		}
	}
	src, err = filepath.EvalSymlinks(src)
	if err != nil {
		return "", fmt.Errorf("redistest: resolve %s: %w", src, err)
	}
	data, err := os.ReadFile(src)
	if err != nil {
		return "", fmt.Errorf("redistest: read %s: %w", src, err)
	}
	sum := sha256.Sum256(data)
	dir := filepath.Join(cacheDir(), "redis-"+hex.EncodeToString(sum[:6]))
	dst := filepath.Join(dir, "redis-server")
	if st, err := os.Stat(dst); err == nil && st.Size() == int64(len(data)) {
		return dst, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("redistest: cache dir for redis-server: %w", err)
	}
	tmp, err := os.CreateTemp(dir, ".redis-server-*")
	if err != nil {
		return "", fmt.Errorf("redistest: copy redis-server: %w", err)
	}
	defer os.Remove(tmp.Name()) // no-op after the rename
	if _, err := io.Copy(tmp, bytes.NewReader(data)); err != nil {
		tmp.Close()
		return "", fmt.Errorf("redistest: copy redis-server: %w", err)
	}
	if err := tmp.Chmod(0o755); err != nil {
		tmp.Close()
		return "", fmt.Errorf("redistest: copy redis-server: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return "", fmt.Errorf("redistest: copy redis-server: %w", err)
	}
	if err := os.Rename(tmp.Name(), dst); err != nil {
		return "", fmt.Errorf("redistest: copy redis-server: %w", err)
	}
	return dst, nil
}

// redisCLIPath returns redis-cli, which the scratch image carries so that a
// developer can `docker exec` into a node; the harness itself never runs it.
func redisCLIPath() (string, error) {
	if p, err := exec.LookPath("redis-cli"); err == nil {
		return p, nil
	}
	if _, err := os.Stat("/usr/bin/redis-cli"); err == nil {
		return "/usr/bin/redis-cli", nil
	}
	return "", errors.New("no redis-cli on PATH or in /usr/bin: apt-get install redis-tools")
}

// cacheDir is where derived artefacts (the redis-server copy, lock files) are
// kept between test runs; a temp dir when the user has no cache directory.
func cacheDir() string {
	if d, err := os.UserCacheDir(); err == nil {
		return filepath.Join(d, "slotlock")
	}
	return filepath.Join(os.TempDir(), "slotlock-cache")
}

var versionRE = regexp.MustCompile(`v=([0-9]+\.[0-9]+\.[0-9]+)`)

// redisVersion asks a redis-server binary for its version, which names the
// scratch image so that a new Redis on the host gets a new image.
func redisVersion(ctx context.Context, server string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, server, "--version").Output()
	if err != nil {
		return "", fmt.Errorf("redistest: %s --version: %w", server, err)
	}
	m := versionRE.FindSubmatch(out)
	if m == nil {
		return "", fmt.Errorf("redistest: %s --version: no version in %q", server, out)
	}
	return string(m[1]), nil
}
