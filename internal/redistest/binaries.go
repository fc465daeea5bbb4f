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
	"strings"
	"time"
)

// errNoRedis is what both backends report when this machine has no Redis
// binaries: the process backend runs them, the scratch image is built from
// them. The message tells a developer the one command that fixes it.
var errNoRedis = errors.New("no redis-server on PATH and no redis-check-rdb in PATH or /usr/bin: run make test, or apt-get install redis-tools")

// redisServerPath returns the server binary both backends run: the one
// $SLOTLOCK_REDIS_SERVER names when it is set (an explicit choice is never
// replaced by another binary: a run meant for Valkey must not pass on
// Redis), else redis-server from PATH, else Debian's copy below.
//
// Debian's redis-tools ships only redis-check-rdb, which is the whole server:
// it picks its mode from the name it was started as. A copy named
// redis-server therefore runs the server. The copy lives in a per-content
// directory of the user cache, written under a temporary name and renamed,
// so test binaries started in parallel by `go test ./...` never see a half
// written file.
func redisServerPath() (string, error) {
	if v := os.Getenv(EnvServer); v != "" {
		return chosenServer(v)
	}
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

// chosenServer resolves the value of $SLOTLOCK_REDIS_SERVER: a path (it
// has a slash) or a name looked up on PATH, e.g. valkey-server. The file is
// run under its own name: a Redis or Valkey binary picks its mode from the
// name it was started as, and only a "*-server" name runs the server.
func chosenServer(v string) (string, error) {
	p, err := exec.LookPath(v) // a name with a slash is checked as a path
	if err != nil {
		return "", fmt.Errorf("redistest: %s=%q: %w", EnvServer, v, err)
	}
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", fmt.Errorf("redistest: %s=%q: %w", EnvServer, v, err)
	}
	return abs, nil
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

// versionRE reads `--version`: "Redis server v=7.0.15 sha=..." or
// "Valkey server v=8.0.1 sha=...".
var versionRE = regexp.MustCompile(`^(\S+) server v=([0-9]+\.[0-9]+\.[0-9]+)`)

// redisVersion asks a server binary for its name and version ("redis",
// "7.0.15"), which tag the scratch image.
func redisVersion(ctx context.Context, server string) (name, version string, err error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, server, "--version").Output()
	if err != nil {
		return "", "", fmt.Errorf("redistest: %s --version: %w", server, err)
	}
	m := versionRE.FindSubmatch(out)
	if m == nil {
		return "", "", fmt.Errorf("redistest: %s --version: no version in %q", server, out)
	}
	return strings.ToLower(string(m[1])), string(m[2]), nil
}
