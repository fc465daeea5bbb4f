package batch

import (
	"testing"

	"github.com/slotlock/slotlock/internal/protocol"
	"github.com/slotlock/slotlock/slot"
)

// oneSlotSet is a set of n keys, all in slot s.
func oneSlotSet(s uint16, n int) *protocol.Set {
	set := &protocol.Set{}
	for range n {
		set.Keys = append(set.Keys, slot.Key{Slot: s})
	}
	return set
}

// TestContentionThresholds: a Lock skips its first attempt only once its
// keys were found held at least half of their recent contacts, and stops
// as soon as they no longer are; one miss is enough to stop bare first
// attempts; a slot weighs its first samples as their mean, so a key found
// held once sends the next Lock of it to the reservation at once.
// Mutations checked: the thresholds swapped, a miss not counted, the
// first samples weighed 1/window.
func TestContentionThresholds(t *testing.T) {
	var c contention
	key := oneSlotSet(7, 1)
	contended := func() bool { return c.contended(key) }
	bare := func() bool { return c.bare(key, 0) }
	miss := func() { c.met(key, 1, []int{0}) }
	hit := func() { c.met(key, 1, nil) }
	if contended() || !bare() {
		t.Fatalf("fresh: contended %v, bare %v; want an attempt, bare", contended(), bare())
	}
	if c.slots.Load() != nil {
		t.Fatal("no miss yet: the table is not made")
	}
	miss()
	if !contended() || bare() {
		t.Fatalf("fresh, after a miss: contended %v, bare %v; want the reservation", contended(), bare())
	}
	// The table is made at the first miss (here another slot's): hits
	// before it leave no trace.
	c = contention{}
	c.met(oneSlotSet(8, 1), 1, []int{0})
	for range contentionWindow {
		hit()
	}
	miss()
	if contended() || bare() {
		t.Fatalf("after a window of hits and one miss: contended %v, bare %v; want an attempt, by script", contended(), bare())
	}
	// From a window of hits, six misses in a row (1 - (7/8)^6 > 1/2; five
	// are not).
	c = contention{}
	c.met(oneSlotSet(8, 1), 1, []int{0})
	for range contentionWindow {
		hit()
	}
	for i := 1; i <= 6; i++ {
		miss()
		if contended() != (i == 6) {
			t.Fatalf("after %d misses: contended %v", i, contended())
		}
	}
	// From all misses, six hits in a row ((7/8)^6 < 1/2; five are not).
	for range 100 {
		miss()
	}
	for i := 1; i <= 6; i++ {
		hit()
		if contended() != (i < 6) {
			t.Fatalf("after %d hits: contended %v", i, contended())
		}
	}
	for range 100 {
		hit()
	}
	if !bare() {
		t.Fatal("after 100 hits: want bare first attempts")
	}
}

// TestContentionIsPerSlot: a hot slot's misses leave a batch of cold keys
// bare and attempting; a batch with one hot key among cold ones is
// contended; a batch of keys each found held now and then is contended
// when all of them together are free at most half the time (ten keys at
// a tenth: 0.9^10 = 0.35); a prefix attempt's keys past its first failure
// were not contacted and get no sample. Mutations checked: one
// estimate for every slot (the cold batch is contended), the product over
// keys replaced by the worst key's (the ten-key batch attempts).
func TestContentionIsPerSlot(t *testing.T) {
	var c contention
	hot, cold := oneSlotSet(100, 1), oneSlotSet(200, 5)
	for range 20 {
		c.met(hot, 1, []int{0})
		c.met(cold, 5, nil)
	}
	if !c.contended(hot) || c.bare(hot, 0) {
		t.Fatal("the hot key: want the reservation")
	}
	if c.contended(cold) || !c.bare(cold, 0) {
		t.Fatal("the cold keys: want a bare attempt")
	}
	mixed := &protocol.Set{Keys: append(append([]slot.Key{}, cold.Keys...), hot.Keys...)}
	if !c.contended(mixed) {
		t.Fatal("four cold keys and the hot one: want the reservation")
	}
	if c.bare(mixed, 0) || c.bare(mixed, 5) {
		t.Fatal("bare from key 0 or 5 of the mixed batch: the hot key is among them")
	}
	if hotFirst := (&protocol.Set{Keys: append(append([]slot.Key{}, hot.Keys...), cold.Keys...)}); !c.bare(hotFirst, 1) {
		t.Fatal("bare from key 1 of hot-then-cold: only cold keys are left")
	}

	// Ten slots, each found held once in its last ten contacts.
	c = contention{}
	ten := &protocol.Set{}
	for s := range uint16(10) {
		ten.Keys = append(ten.Keys, slot.Key{Slot: 1000 + s})
	}
	for round := range 10 {
		// key round%10 held this round, every other key free
		c.met(ten, 10, []int{round})
	}
	if !c.contended(ten) {
		t.Fatalf("ten keys free %.2f of the time: want the reservation", c.freeChance(ten, 0, 0))
	}
	if c.contended(oneSlotSet(1000, 1)) {
		t.Fatal("one of those keys alone: want an attempt")
	}

	// A prefix attempt that stopped at key 1: key 2 was not contacted.
	c = contention{}
	three := &protocol.Set{Keys: []slot.Key{{Slot: 1}, {Slot: 2}, {Slot: 3}}}
	c.met(three, 2, []int{1})
	if tab := c.slots.Load(); tab[3].Load() != 0 || c.freeChance(oneSlotSet(2, 1), 0, 0) != 0 {
		t.Fatal("a prefix attempt: want key 1 held, key 2 untouched")
	}
}

// TestContentionOfUnmetKeys: a key whose slot has no sample yet takes the
// rate at which such keys were found held. A new Locker on hot keys
// reserves for hot keys it has not met once it met some held; one whose
// unmet keys keep being free attempts them, bare, whatever its hot keys
// do. Mutation checked: an unmet slot estimated free (the hot batch
// attempts).
func TestContentionOfUnmetKeys(t *testing.T) {
	var c contention
	batch := func(first uint16) *protocol.Set {
		set := &protocol.Set{}
		for s := range uint16(10) {
			set.Keys = append(set.Keys, slot.Key{Slot: first + s})
		}
		return set
	}
	c.met(batch(0), 10, []int{1, 3, 5, 7, 9})
	if !c.contended(batch(100)) {
		t.Fatalf("half of the first keys met were held: an unmet batch is free %.2f of the time, want the reservation", c.freeChance(batch(100), 0, 0))
	}
	hot := batch(0)
	for b := range 60 {
		c.met(hot, 10, []int{1, 3, 5, 7, 9})
		c.met(batch(1000+10*uint16(b)), 10, nil) // cold: met once each
	}
	cold := batch(5000)
	if c.contended(cold) || !c.bare(cold, 0) {
		t.Fatalf("unmet keys keep being free: want a bare attempt, free %.2f", c.freeChance(cold, 0, 0))
	}
	if !c.contended(hot) {
		t.Fatal("the hot keys: want the reservation")
	}
}
