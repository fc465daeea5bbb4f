package main

import (
	"testing"

	"github.com/slotlock/slotlock/internal/redistest"
)

// TestBenchBackend: a benchmark's cluster is redis-server processes unless
// SLOTLOCK_CLUSTER names a backend (the docker backend's single cgroup
// starves the nodes in the many-process cells: benchBackend).
func TestBenchBackend(t *testing.T) {
	t.Setenv(redistest.EnvBackend, "")
	if got := benchBackend(); got != redistest.BackendProcess {
		t.Errorf("unset: backend %q, want %q", got, redistest.BackendProcess)
	}
	for _, b := range []redistest.Backend{redistest.BackendDocker, redistest.BackendAuto, redistest.BackendProcess} {
		t.Setenv(redistest.EnvBackend, string(b))
		if got := benchBackend(); got != b {
			t.Errorf("%s=%s: backend %q", redistest.EnvBackend, b, got)
		}
	}
}
