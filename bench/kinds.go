package bench

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"time"
)

// A cell's Kind is the kind of lease its slotlock workers take. The
// matrix's own cells have none (Lock, waiting as long as the round
// allows); a cell with a Kind asks through Locker.Acquire with a bounded
// wait (KindWait) and counts the waits that ran out (Result.RanOut)
// instead of failing. Every kind is meant for contended cells of the
// slotlock contenders, one Locker per worker (slotlock-multi) or one per
// process (Procs > 0), where the workers meet only in Redis.
const (
	// KindPlain: K exclusive keys, the baseline of reentrant and per-slot.
	KindPlain = "plain"
	// KindMixed: 0-3 exclusive and 0-7 shared keys (at least one key).
	KindMixed = "mixed"
	// KindAllExcl: the same requests as KindMixed, every key exclusive.
	KindAllExcl = "allexcl"
	// KindPermits: permits of 1-PermitUnits units of one or two of
	// PermitResources resources, each of PermitLimit units.
	KindPermits = "permits"
	// KindReentrant: K exclusive keys under slotlock.WithOwner, one owner
	// per worker.
	KindReentrant = "reentrant"
	// KindPerSlot: K exclusive keys, Lockers with Options.PerSlot.
	KindPerSlot = "perslot"
)

// Kinds lists every kind, in report order.
var Kinds = []string{KindPlain, KindMixed, KindAllExcl, KindPermits, KindReentrant, KindPerSlot}

// KindWait is the wait of one request of a kind cell: a request still
// waiting after it gives up (Request.Wait), and Result.RanOut counts it.
const KindWait = 3 * time.Second

// The shape of the requests: mixed ones take up to MixedExclusive
// exclusive and MixedShared shared keys; permit requests ask for one or
// two resources of PermitResources, each up to PermitUnits units of
// PermitLimit.
const (
	MixedExclusive  = 3
	MixedShared     = 7
	PermitResources = 4
	PermitUnits     = 4
	PermitLimit     = 8
)

// KindAsk is one request of a kind: exclusive and shared keys (keyspace
// numbers) and permits.
type KindAsk struct {
	Exclusive, Shared []int
	Permits           []PermitAsk
}

// PermitAsk is Units of resource number Resource (of PermitResources).
type PermitAsk struct {
	Resource, Units int
}

// PermitName is the resource name of permit resource r.
func PermitName(r int) string { return fmt.Sprintf("res%d", r) }

// kindDraw draws the sizes of kind requests; a worker's draws depend only
// on its seed, so that a mixed cell and its all-exclusive pair make the
// same requests in the same order (the keys come from the worker's
// sampler, seeded alike).
type kindDraw struct {
	rng *rand.Rand
}

func newKindDraw(seed uint64) *kindDraw {
	return &kindDraw{rng: rand.New(rand.NewPCG(seed, kindStream))}
}

// kindStream is the PCG stream of the request sizes.
const kindStream = 0x6b696e64

// ask draws the next request of kind with k keys (plain kinds) from pick,
// which returns n distinct keyspace numbers.
func (d *kindDraw) ask(kind string, k int, pick func(n int) []int) KindAsk {
	switch kind {
	case KindMixed, KindAllExcl:
		var ex, sh int
		for ex+sh == 0 {
			ex, sh = d.rng.IntN(MixedExclusive+1), d.rng.IntN(MixedShared+1)
		}
		idx := pick(ex + sh)
		if kind == KindAllExcl {
			return KindAsk{Exclusive: idx}
		}
		return KindAsk{Exclusive: idx[:ex], Shared: idx[ex:]}
	case KindPermits:
		n := 1 + d.rng.IntN(2)
		res := d.rng.Perm(PermitResources)[:n]
		var ps []PermitAsk
		for _, r := range res {
			ps = append(ps, PermitAsk{Resource: r, Units: 1 + d.rng.IntN(PermitUnits)})
		}
		return KindAsk{Permits: ps}
	}
	return KindAsk{Exclusive: pick(k)}
}

// IsKind says whether kind is one of Kinds.
func IsKind(kind string) bool { return slices.Contains(Kinds, kind) }

// KindCell is the contended kind cell: K = 10 (the most keys of a mixed
// request) and 16 workers over the hot keys at rtt, one Locker per worker
// in this process (procs 0) or one per process over procs processes, each
// with its share of the machine's CPUs.
func KindCell(kind string, rtt time.Duration, procs int) Cell {
	c := Cell{Contender: "slotlock-multi", K: ContendedK, W: ContendedW, Hot: HotKeys, RTT: rtt, Kind: kind}
	if kind == KindPermits {
		c.K = 0
	}
	if procs > 0 {
		c.Contender = "slotlock"
		c = inProcs(c, procs)
	}
	return c
}

// KindProcs is the process split of the kind cells: 4 × 4, where the
// existing cells show waiting across processes with CPU to spare at 1 ms.
const KindProcs = 4

// KindRTT is the round trip of the kind cells (FarRTT: one Locker keeps
// less than a core busy there, so ratios say how waiters are ordered).
const KindRTT = FarRTT

// KindCells are the kind cells of the matrix: permits, in one process
// and across processes. The other kinds run only in the pairs that their
// targets read (cmd/slotbench), which measure them anyway: as matrix
// cells too they would cost make bench about 70 s more.
func KindCells() []Cell {
	return []Cell{KindCell(KindPermits, KindRTT, 0), KindCell(KindPermits, KindRTT, KindProcs)}
}

// KindRequests returns a source of the requests a worker of a kind cell
// makes, drawn over the keys numbered 0 to hot-1 (k keys for the kinds of
// K exclusive keys), for tools that run the kinds on their own
// (cmd/xproc).
func KindRequests(kind string, k, hot int, seed uint64) func() KindAsk {
	d := newKindDraw(seed)
	keys := rand.New(rand.NewPCG(seed, samplerStream))
	return func() KindAsk {
		return d.ask(kind, k, func(n int) []int { return keys.Perm(hot)[:n] })
	}
}
