package slotlock_test

import (
	"context"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/slotlock/slotlock"
	"github.com/slotlock/slotlock/slot"
)

// BenchmarkRequestMix compares, in one run, a 1,000-key request of 900
// shared and 100 exclusive keys with a 1,000-key exclusive one: each
// iteration acquires and releases one batch of each, alternating which goes
// first. It reports each side's median time per batch and the ratio of the
// medians (mixed / exclusive), with the ratio's spread over groups of 10
// pairs. Issue 17 asks for a ratio of at most 1.2; docs/design.md ("Cheaper
// set operations") has the command.
func BenchmarkRequestMix(b *testing.B) {
	e := newEnv(b)
	l := e.locker(slotlock.Options{TTL: 30 * time.Second})
	ctx := context.Background()
	excl := slotlock.Request{Exclusive: keysN("mixx", 1000)}
	keys := keysN("mixm", 1000)
	mixed := slotlock.Request{Shared: keys[:900], Exclusive: keys[900:]}
	run := func(r slotlock.Request) time.Duration {
		t0 := time.Now()
		lease, err := l.Acquire(ctx, r)
		if err != nil {
			b.Fatal(err)
		}
		if err := lease.Release(ctx); err != nil {
			b.Fatal(err)
		}
		return time.Since(t0)
	}
	for range 3 { // warm both paths (script cache, connections)
		run(excl)
		run(mixed)
	}
	var te, tm []time.Duration
	b.ResetTimer()
	for i := range b.N {
		if i%2 == 0 {
			te = append(te, run(excl))
			tm = append(tm, run(mixed))
		} else {
			tm = append(tm, run(mixed))
			te = append(te, run(excl))
		}
	}
	b.StopTimer()
	me, mm := median(te), median(tm)
	b.ReportMetric(float64(me)/1e6, "excl-ms/batch")
	b.ReportMetric(float64(mm)/1e6, "mixed-ms/batch")
	b.ReportMetric(float64(mm)/float64(me), "mixed/excl")
	lo, hi := groupRatios(tm, te, 10)
	b.ReportMetric(lo, "ratio-min")
	b.ReportMetric(hi, "ratio-max")
}

// BenchmarkSharedReaders compares 100 concurrent readers of one key with
// 100 concurrent readers of distinct keys (one key each), in rotating
// rounds of one run: each round, every reader acquires and releases its
// key 40 times; batches/s is the round's total over its wall time. It
// reports the median batches/s of each side and the ratio same/distinct,
// with the spread of the per-round ratios. Issue 17 asks for a ratio of
// at least 0.8: readers of one key must not serialise. Distinct keys
// spread over the 3 masters, while one key's readers all go to one
// single-threaded Redis node, so a third side takes distinct keys all on
// that key's master: same/one-node separates what sharing a key costs
// from what one node's thread costs.
func BenchmarkSharedReaders(b *testing.B) {
	e := newEnv(b)
	l := e.locker(slotlock.Options{TTL: 30 * time.Second})
	ctx := context.Background()
	const readers, each = 100, 40
	const same = "rsame"
	distinct := keysN("rdist", readers)
	home, err := e.c.NodeForSlot(ctx, slot.KeySlot(same))
	if err != nil {
		b.Fatal(err)
	}
	var oneNode []string
	for i := 0; len(oneNode) < readers; i++ {
		k := "rone:" + strconv.Itoa(i)
		n, err := e.c.NodeForSlot(ctx, slot.KeySlot(k))
		if err != nil {
			b.Fatal(err)
		}
		if n == home {
			oneNode = append(oneNode, k)
		}
	}
	round := func(key func(r int) string) float64 {
		var wg sync.WaitGroup
		t0 := time.Now()
		for r := range readers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				k := key(r)
				for range each {
					lease, err := l.Acquire(ctx, slotlock.Request{Shared: []string{k}})
					if err != nil {
						b.Error(err)
						return
					}
					if err := lease.Release(ctx); err != nil {
						b.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
		return readers * each / time.Since(t0).Seconds()
	}
	sides := []func(r int) string{
		func(int) string { return same },
		func(r int) string { return distinct[r] },
		func(r int) string { return oneNode[r] },
	}
	for _, side := range sides {
		round(side)
	}
	got := make([][]float64, len(sides))
	var ratios, ratiosOne []float64
	b.ResetTimer()
	for i := range b.N {
		var v [3]float64
		for j := range sides { // rotate which side goes first
			k := (i + j) % len(sides)
			v[k] = round(sides[k])
		}
		for k := range sides {
			got[k] = append(got[k], v[k])
		}
		ratios, ratiosOne = append(ratios, v[0]/v[1]), append(ratiosOne, v[0]/v[2])
	}
	b.StopTimer()
	med := func(xs []float64) float64 {
		s := slices.Sorted(slices.Values(xs))
		return s[len(s)/2]
	}
	b.ReportMetric(med(got[0]), "same-batches/s")
	b.ReportMetric(med(got[1]), "distinct-batches/s")
	b.ReportMetric(med(got[2]), "one-node-batches/s")
	b.ReportMetric(med(ratios), "same/distinct")
	b.ReportMetric(slices.Min(ratios), "ratio-min")
	b.ReportMetric(slices.Max(ratios), "ratio-max")
	b.ReportMetric(med(ratiosOne), "same/one-node")
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

// groupRatios returns the smallest and largest ratio of the medians of a
// and b over consecutive groups of n pairs (the whole run when shorter).
func groupRatios(a, b []time.Duration, n int) (lo, hi float64) {
	lo, hi = 1e9, 0
	for i := 0; i < len(a); i += n {
		j := min(i+n, len(a))
		r := float64(median(a[i:j])) / float64(median(b[i:j]))
		lo, hi = min(lo, r), max(hi, r)
	}
	return lo, hi
}
