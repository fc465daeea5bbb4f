package batch

import "testing"

// TestContentionThresholds: a Lock skips its first attempt only once at
// least half of the recent acquisitions met a held key, and stops as soon
// as they no longer do; one miss is enough to stop bare first attempts; a
// new estimate weighs its first samples as their mean, so a Locker whose
// first acquisition meets a held key waits by reservation at once.
// Mutations checked: the thresholds swapped, a miss not counted, the
// first samples weighed 1/window.
func TestContentionThresholds(t *testing.T) {
	var c contention
	contended := func() bool { return c.rate() >= contendedAt }
	bare := func() bool { return c.rate() < bareBelow }
	if contended() || !bare() {
		t.Fatalf("fresh: contended %v, bare %v; want an attempt, bare", contended(), bare())
	}
	c.note(true)
	if !contended() || bare() {
		t.Fatalf("fresh, after a miss: contended %v, bare %v; want the reservation", contended(), bare())
	}
	c = contention{}
	for range contentionWindow {
		c.note(false)
	}
	if contended() || !bare() {
		t.Fatalf("after hits: contended %v, bare %v", contended(), bare())
	}
	c.note(true)
	if contended() || bare() {
		t.Fatalf("after one miss: contended %v, bare %v; want an attempt, by script", contended(), bare())
	}
	// From a window of hits, six misses in a row (1 - (7/8)^6 > 1/2; five
	// are not).
	c = contention{}
	for range contentionWindow {
		c.note(false)
	}
	for i := 1; i <= 6; i++ {
		c.note(true)
		if contended() != (i == 6) {
			t.Fatalf("after %d misses: contended %v", i, contended())
		}
	}
	for range 100 {
		c.note(true)
	}
	if c.rate() < contentionScale*9/10 {
		t.Fatalf("after 100 misses the rate is %d/%d", c.rate(), contentionScale)
	}
	// From all misses, six hits in a row ((7/8)^6 < 1/2; five are not).
	for i := 1; i <= 6; i++ {
		c.note(false)
		if contended() != (i < 6) {
			t.Fatalf("after %d hits: contended %v", i, contended())
		}
	}
	for range 100 {
		c.note(false)
	}
	if !bare() {
		t.Fatalf("after 100 hits the rate is %d/%d: want bare first attempts", c.rate(), contentionScale)
	}
}
