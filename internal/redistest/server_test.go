package redistest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestParseServer reads INFO server as the two servers write it: Valkey
// names itself and keeps redis_version at 7.2.4 for old clients, so its own
// version is valkey_version; Redis has no server_name.
func TestParseServer(t *testing.T) {
	for _, tc := range []struct {
		info string
		want Server
	}{
		{"# Server\r\nredis_version:7.0.15\r\nredis_git_sha1:00000000\r\n", Server{"redis", "7.0.15"}},
		{"# Server\r\nredis_version:7.2.4\r\nserver_name:valkey\r\nvalkey_version:8.0.1\r\n", Server{"valkey", "8.0.1"}},
	} {
		got, err := ParseServer(tc.info)
		if err != nil || got != tc.want {
			t.Errorf("ParseServer(%q) = %v, %v; want %v", tc.info, got, err, tc.want)
		}
	}
	if _, err := ParseServer("# Server\r\n"); err == nil {
		t.Error("ParseServer of a reply without a version: no error")
	}
}

// TestServerIsTheBinary: the server the cluster says it runs is the one the
// harness's binary says it is (so a run's first line names what was tested).
func TestServerIsTheBinary(t *testing.T) {
	c := Require(t, shared)
	ctx := testCtx(t)
	got, err := c.Server(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if c.Backend() != BackendProcess {
		t.Skipf("%s backend: the image's binary is not on this host", c.Backend())
	}
	bin, err := redisServerPath()
	if err != nil {
		t.Fatal(err)
	}
	name, version, err := redisVersion(ctx, bin)
	if err != nil {
		t.Fatal(err)
	}
	if want := (Server{name, version}); got != want {
		t.Fatalf("cluster runs %v, %s says %v", got, bin, want)
	}
	if d := c.Describe(ctx); !strings.Contains(d, got.String()) || !strings.Contains(d, bin) {
		t.Fatalf("Describe() = %q: names neither %v nor %s", d, got, bin)
	}
}

// TestExplicitServerIsNeverReplaced: a SLOTLOCK_REDIS_SERVER that names no
// runnable binary is an error, not a fall-back to another server.
func TestExplicitServerIsNeverReplaced(t *testing.T) {
	notExec := filepath.Join(t.TempDir(), "valkey-server")
	if err := os.WriteFile(notExec, []byte("not a program"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{"/nonexistent/valkey-server", "no-such-server-on-path", notExec} {
		t.Setenv(EnvServer, v)
		if p, err := redisServerPath(); err == nil || !strings.Contains(err.Error(), EnvServer) {
			t.Errorf("%s=%s: redisServerPath() = %q, %v; want an error naming %s", EnvServer, v, p, err, EnvServer)
		}
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv(EnvServer, self)
	if p, err := redisServerPath(); err != nil || p != self {
		t.Errorf("%s=%s: redisServerPath() = %q, %v", EnvServer, self, p, err)
	}
}
