package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"time"

	"github.com/slotlock/slotlock/bench"
)

// machine describes where the numbers were measured: without it they mean
// little.
type machine struct {
	CPUs         int
	CPUModel     string
	Kernel       string
	GoVersion    string
	RedisVersion string
	Backend      string
	// Library is the slotlock commit measured, with "+dirty" when its tree
	// (outside bench/ and docs/) had uncommitted changes.
	Library   string
	Command   string
	Started   time.Time
	Took      time.Duration
	LoadStart string
	LoadEnd   string
	Short     bool
	Benchtime time.Duration
	HotTime   time.Duration
	Shape     string
	// Wire is the measured round trip behind each emulated RTT; Floor the
	// same without the delaying layer.
	Wire  []bench.Wire
	Floor bench.Wire
}

func describeMachine(ctx context.Context, env *bench.Env, cfg config) *machine {
	m := &machine{
		CPUs:      runtime.NumCPU(),
		CPUModel:  cpuModel(),
		Kernel:    strings.TrimSpace(readFile("/proc/sys/kernel/osrelease")),
		GoVersion: runtime.Version(),
		Backend:   "attached",
		Library:   libraryCommit(ctx, cfg.root),
		Command:   command(cfg),
		Started:   time.Now(),
		LoadStart: loadAvg(),
		Short:     cfg.short,
		Benchtime: cfg.benchtime,
		HotTime:   cfg.hotTime,
	}
	if c := env.Cluster(); c != nil {
		m.Backend = string(c.Backend())
	}
	m.Shape = env.Shape()
	if v, err := env.RedisVersion(ctx); err == nil {
		m.RedisVersion = v
	} else {
		m.RedisVersion = "unknown (" + err.Error() + ")"
	}
	return m
}

func (m *machine) finish(began time.Time) {
	m.Took = time.Since(began)
	m.LoadEnd = loadAvg()
}

func (m *machine) oneLine() string {
	return fmt.Sprintf("%d × %s, %s, %s, slotlock %s", m.CPUs, m.CPUModel, m.RedisVersion, m.GoVersion, m.Library)
}

// command is how to repeat the run: the make target when the run used its
// defaults, else the runner's own command line.
func command(cfg config) string {
	args := os.Args[1:]
	if len(args) == 0 {
		if cfg.short {
			return "make bench-short"
		}
		return "make bench"
	}
	return "cd bench && go run ./cmd/slotbench " + strings.Join(args, " ")
}

func cpuModel() string {
	for _, line := range strings.Split(readFile("/proc/cpuinfo"), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown CPU"
}

func loadAvg() string {
	f := strings.Fields(readFile("/proc/loadavg"))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

func readFile(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return string(b)
}

func libraryCommit(ctx context.Context, root string) string {
	out, err := exec.CommandContext(ctx, "git", "-C", root, "rev-parse", "--short=12", "HEAD").Output()
	if err != nil {
		return "unknown commit"
	}
	commit := strings.TrimSpace(string(out))
	st, err := exec.CommandContext(ctx, "git", "-C", root, "status", "--porcelain", "--", ".", ":!bench", ":!docs").Output()
	if err == nil && len(strings.TrimSpace(string(st))) > 0 {
		commit += "+dirty"
	}
	return commit
}
