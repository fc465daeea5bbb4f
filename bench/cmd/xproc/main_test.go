package main

import (
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/slotlock/slotlock/bench"
	"github.com/slotlock/slotlock/internal/redistest"
)

var cluster *redistest.Cluster

// envRunMain makes the test binary run xproc's main (the parent of a
// -procs run; its children carry envChild).
const envRunMain = "XPROC_TEST_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(envRunMain) != "" || os.Getenv(envChild) != "" {
		main()
		os.Exit(0)
	}
	os.Exit(redistest.Main(m, redistest.Options{}, &cluster))
}

// TestKinds runs every -kind over two worker processes (this test binary,
// re-executed as xproc) against the harness's cluster, briefly, and reads
// the summary: grants counted and the waits that ran out reported. A kind
// that errs ends its process (log.Fatal) and fails the run. Mutations
// that fail it (checked): -kind not passed on to the children (each
// reports the kind it ran, and the parent refuses another), a kind's
// request refused (permits without their Limit: ErrInvalid); and ran out
// left out of the summary.
func TestKinds(t *testing.T) {
	c := redistest.Require(t, cluster)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	line := regexp.MustCompile(`(?m)^batches (\d+) .*\n(?:.*\n)*?ran out (\d+)$`)
	for _, kind := range bench.Kinds {
		t.Run(kind, func(t *testing.T) {
			cmd := exec.Command(exe, "-addrs", strings.Join(c.Addrs(), ","), "-procs", "2", "-w", "4", "-hot", "30",
				"-kind", kind, "-d", "300ms", "-rtt", "0", "-prefix", "xproctest"+kind)
			cmd.Env = append(os.Environ(), envRunMain+"=1")
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("%v: %s", err, out)
			}
			m := line.FindSubmatch(out)
			if m == nil {
				t.Fatalf("no summary with waits that ran out in:\n%s", out)
			}
			if n, _ := strconv.Atoi(string(m[1])); n == 0 {
				t.Fatalf("no grants:\n%s", out)
			}
		})
	}
}
