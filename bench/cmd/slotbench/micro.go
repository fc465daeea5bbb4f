package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// microResult is the output of the slot package's micro-benchmarks.
type microResult struct {
	Command string
	Lines   []string // the benchmark lines as go test printed them
	// KeySlot16 is the ns/op and allocs/op of BenchmarkKeySlot16.
	KeySlot16NS     float64
	KeySlot16Allocs int64
}

// slotMicro runs the slot package's own benchmarks from the root module:
// pure computation, no Redis.
func slotMicro(ctx context.Context, cfg config) (*microResult, error) {
	args := []string{"test", "-run", "^$", "-bench", ".", "-benchmem", "./slot/"}
	if cfg.short {
		args = append(args, "-benchtime", "100ms")
	}
	goBin := os.Getenv("GO")
	if goBin == "" {
		goBin = "go"
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, goBin, args...)
	cmd.Dir = cfg.root
	out, err := cmd.CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("%s: %w\n%s", strings.Join(cmd.Args, " "), err, out)
	}
	res := &microResult{Command: "go " + strings.Join(args, " ")}
	for _, line := range strings.Split(string(out), "\n") {
		if !strings.HasPrefix(line, "Benchmark") {
			continue
		}
		res.Lines = append(res.Lines, line)
		f := strings.Fields(line)
		if !strings.HasPrefix(f[0], "BenchmarkKeySlot16") {
			continue
		}
		for i := 1; i+1 < len(f); i++ {
			switch f[i+1] {
			case "ns/op":
				res.KeySlot16NS, _ = strconv.ParseFloat(f[i], 64)
			case "allocs/op":
				res.KeySlot16Allocs, _ = strconv.ParseInt(f[i], 10, 64)
			}
		}
	}
	if len(res.Lines) == 0 {
		return nil, fmt.Errorf("no benchmark lines in:\n%s", out)
	}
	fmt.Printf("slotbench: slot micro-benchmarks: KeySlot of a 16-byte key %.2f ns, %d allocs\n", res.KeySlot16NS, res.KeySlot16Allocs)
	return res, nil
}
