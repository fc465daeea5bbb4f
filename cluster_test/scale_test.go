package clustertest

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// Environment variables of the fault suite.
const (
	// envChaos=long runs every scenario longer and more often (make
	// chaos); anything else, or unset, is the short run CI does.
	envChaos = "SLOTLOCK_CHAOS"
	// envReport names a file that receives one JSON line per scenario
	// run, for the table in docs/faults.md.
	envReport = "SLOTLOCK_CHAOS_REPORT"
)

// scale is how long the suite runs: short by default, long for make chaos.
type scale struct{ long bool }

func chaosScale() scale {
	return scale{long: strings.EqualFold(strings.TrimSpace(os.Getenv(envChaos)), "long")}
}

// pick returns short or long by the scale.
func pick[T any](s scale, short, long T) T {
	if s.long {
		return long
	}
	return short
}

func (s scale) String() string { return pick(s, "short", "long") }

// report gathers what one scenario run counted and measured, and prints it
// as one line (and one JSON line into $SLOTLOCK_CHAOS_REPORT): grants,
// faults injected, violations (0 wherever the library claims safety), and
// the windows measured where it does not.
type report struct {
	t      testing.TB
	name   string
	mu     sync.Mutex
	keys   []string
	values map[string]any
}

func newReport(t testing.TB, backend string) *report {
	r := &report{t: t, name: t.Name(), values: map[string]any{}}
	r.set("backend", backend)
	r.set("scale", chaosScale().String())
	return r
}

func (r *report) set(k string, v any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.values[k]; !ok {
		r.keys = append(r.keys, k)
	}
	r.values[k] = v
}

func (r *report) add(k string, n int) {
	r.mu.Lock()
	v, _ := r.values[k].(int)
	r.mu.Unlock()
	r.set(k, v+n)
}

// print logs the report and appends it to $SLOTLOCK_CHAOS_REPORT.
func (r *report) print() {
	r.mu.Lock()
	defer r.mu.Unlock()
	var b strings.Builder
	for _, k := range r.keys {
		fmt.Fprintf(&b, " %s=%v", k, format(r.values[k]))
	}
	r.t.Logf("chaos report %s:%s", r.name, b.String())
	path := os.Getenv(envReport)
	if path == "" {
		return
	}
	row := map[string]any{"scenario": r.name, "at": time.Now().UTC().Format(time.RFC3339)}
	for _, k := range r.keys {
		row[k] = format(r.values[k])
	}
	line, err := json.Marshal(row)
	if err != nil {
		r.t.Errorf("report: %v", err)
		return
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		r.t.Errorf("report: %v", err)
		return
	}
	defer f.Close()
	if _, err := f.Write(append(line, '\n')); err != nil {
		r.t.Errorf("report: %v", err)
	}
}

func format(v any) any {
	switch x := v.(type) {
	case time.Duration:
		return x.Round(10 * time.Microsecond).String()
	case float64:
		return fmt.Sprintf("%.2f", x)
	}
	return v
}

// durations summarises measured windows: count, median, p99 and max.
type durations []time.Duration

func (d durations) String() string {
	if len(d) == 0 {
		return "n=0"
	}
	s := slices.Clone(d)
	slices.Sort(s)
	q := func(p float64) time.Duration { return s[min(len(s)-1, int(p*float64(len(s))))] }
	r := func(x time.Duration) time.Duration { return x.Round(100 * time.Microsecond) }
	return fmt.Sprintf("n=%d min=%v p50=%v p99=%v max=%v", len(s), r(s[0]), r(q(0.5)), r(q(0.99)), r(s[len(s)-1]))
}
