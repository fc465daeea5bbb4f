package main

import (
	"cmp"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/google/pprof/profile"
)

// profileSummary is a CPU profile boiled down to what the report needs.
type profileSummary struct {
	Total time.Duration
	// Buckets split every sample by what it was doing (see bucketOf).
	Buckets []share
	// Library lists slotlock's own functions by cumulative time: the
	// function and everything it called.
	Library []share
	// Flat lists the functions that were on CPU themselves.
	Flat []share
}

type share struct {
	Name string
	Time time.Duration
}

const (
	bucketSyscall = "syscalls: socket reads and writes (kernel time included)"
	bucketGC      = "garbage collection and allocation"
	bucketSched   = "Go scheduler, timers, netpoll wake-ups"
	bucketLib     = "slotlock code (batch, slot, localq, topology, facade)"
	bucketRueidis = "rueidis: command building, encoding, decoding, pipelining"
	bucketBench   = "benchmark harness (key sampling, exclusion check)"
	bucketCrypto  = "crypto/rand (owner token)"
	bucketOther   = "other"
)

func summarizeProfile(path string) (profileSummary, error) {
	var s profileSummary
	f, err := os.Open(path)
	if err != nil {
		return s, err
	}
	defer f.Close()
	p, err := profile.Parse(f)
	if err != nil {
		return s, err
	}
	vi := len(p.SampleType) - 1 // cpu nanoseconds
	buckets := map[string]time.Duration{}
	cum := map[string]time.Duration{}
	flat := map[string]time.Duration{}
	for _, smp := range p.Sample {
		v := time.Duration(smp.Value[vi])
		s.Total += v
		frames := framesOf(smp)
		if len(frames) == 0 {
			continue
		}
		flat[frames[0]] += v
		buckets[bucketOf(frames)] += v
		seen := map[string]bool{}
		for _, fn := range frames {
			if isLibrary(fn) && !seen[fn] {
				seen[fn] = true
				cum[fn] += v
			}
		}
	}
	s.Buckets = sorted(buckets, 0)
	s.Library = sorted(cum, 14)
	s.Flat = sorted(flat, 12)
	return s, nil
}

// framesOf lists a sample's functions, innermost first, inlined frames
// included.
func framesOf(smp *profile.Sample) []string {
	var out []string
	for _, loc := range smp.Location {
		for _, ln := range loc.Line {
			if ln.Function != nil {
				out = append(out, ln.Function.Name)
			}
		}
	}
	return out
}

func isLibrary(fn string) bool {
	return strings.HasPrefix(fn, "github.com/slotlock/slotlock") &&
		!strings.HasPrefix(fn, "github.com/slotlock/slotlock/bench") &&
		!strings.HasPrefix(fn, "github.com/slotlock/slotlock/internal/redistest")
}

// bucketOf names what a sample was doing. System calls and the runtime's
// own work (GC, scheduling) are recognised at the innermost frame; other
// samples belong to the innermost frame of a package we can name, so that
// rueidis code called by slotlock counts as rueidis and slotlock code
// called by the harness counts as slotlock.
func bucketOf(frames []string) string {
	leaf := frames[0]
	switch {
	case strings.HasPrefix(leaf, "syscall.") || strings.HasPrefix(leaf, "internal/runtime/syscall") ||
		strings.HasPrefix(leaf, "runtime/internal/syscall") || strings.HasPrefix(leaf, "internal/poll."):
		return bucketSyscall
	case slices.Contains(frames, "runtime.gcBgMarkWorker") || strings.HasPrefix(leaf, "runtime.mallocgc") ||
		strings.HasPrefix(leaf, "runtime.gc") || strings.HasPrefix(leaf, "runtime.scanobject") ||
		strings.HasPrefix(leaf, "runtime.greyobject") || strings.HasPrefix(leaf, "runtime.markBits") ||
		strings.HasPrefix(leaf, "runtime.heapBits") || strings.HasPrefix(leaf, "runtime.(*mspan)") ||
		strings.HasPrefix(leaf, "runtime.(*mcache)") || strings.HasPrefix(leaf, "runtime.(*mheap)") ||
		strings.HasPrefix(leaf, "runtime.memclrNoHeapPointers") || strings.HasPrefix(leaf, "runtime.sweepone") ||
		strings.HasPrefix(leaf, "runtime.bgsweep") || strings.HasPrefix(leaf, "runtime.wbBuf") ||
		strings.HasPrefix(leaf, "runtime.bulkBarrier") || strings.HasPrefix(leaf, "runtime.typePointers"):
		return bucketGC
	}
	for _, fn := range frames {
		switch {
		case strings.HasPrefix(fn, "github.com/redis/rueidis"):
			return bucketRueidis
		case strings.HasPrefix(fn, "crypto/"):
			return bucketCrypto
		case isLibrary(fn):
			return bucketLib
		case strings.HasPrefix(fn, "github.com/slotlock/slotlock/bench"):
			return bucketBench
		}
	}
	if strings.HasPrefix(leaf, "runtime.") || strings.HasPrefix(leaf, "time.") {
		return bucketSched
	}
	return bucketOther
}

func sorted(m map[string]time.Duration, limit int) []share {
	out := make([]share, 0, len(m))
	for k, v := range m {
		out = append(out, share{k, v})
	}
	slices.SortFunc(out, func(a, b share) int {
		if a.Time != b.Time {
			return cmp.Compare(b.Time, a.Time)
		}
		return strings.Compare(a.Name, b.Name)
	})
	if limit > 0 && len(out) > limit {
		out = out[:limit]
	}
	return out
}
