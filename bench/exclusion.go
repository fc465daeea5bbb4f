package bench

import "sync/atomic"

// exclusion is the in-process witness of mutual exclusion: a worker claims
// every key it was told it holds, and a claim that finds another worker's
// mark is a violation, whatever Redis says. It costs one CAS per key, so
// it runs on every timed batch.
//
// Shared keys and permits (kind cells) are claimed too: a shared key
// counts its readers, and a reader that finds a writer's mark, or a
// writer that finds readers, is a violation (readers may overlap each
// other, a writer overlaps nobody); a permit adds its units to its
// resource's count, and a count above PermitLimit is a violation. Go's
// atomics are sequentially consistent, so of a writer and a reader that
// claim one key at once, at least one sees the other.
type exclusion struct {
	owner   []atomic.Int32
	readers []atomic.Int32
	units   [PermitResources]atomic.Int64
}

func newExclusion(size int) *exclusion {
	return &exclusion{owner: make([]atomic.Int32, size), readers: make([]atomic.Int32, size)}
}

// claim marks keys idx as held by worker w and returns how many were
// already marked by someone else.
func (x *exclusion) claim(idx []int, w int) (violations int) {
	for _, i := range idx {
		if !x.owner[i].CompareAndSwap(0, int32(w)+1) {
			violations++
		}
		if x.readers[i].Load() > 0 {
			violations++
		}
	}
	return violations
}

// unclaim clears worker w's marks; it must run before the release is sent,
// since another worker may get the keys before the release returns.
func (x *exclusion) unclaim(idx []int, w int) {
	for _, i := range idx {
		x.owner[i].CompareAndSwap(int32(w)+1, 0)
	}
}

// claimAsk claims everything one kind request holds: exclusive keys,
// shared keys, permits.
func (x *exclusion) claimAsk(a KindAsk, w int) (violations int) {
	violations = x.claim(a.Exclusive, w)
	for _, i := range a.Shared {
		x.readers[i].Add(1)
		if x.owner[i].Load() != 0 {
			violations++
		}
	}
	for _, p := range a.Permits {
		if x.units[p.Resource].Add(int64(p.Units)) > PermitLimit {
			violations++
		}
	}
	return violations
}

// unclaimAsk undoes claimAsk, before the release is sent.
func (x *exclusion) unclaimAsk(a KindAsk, w int) {
	x.unclaim(a.Exclusive, w)
	for _, i := range a.Shared {
		x.readers[i].Add(-1)
	}
	for _, p := range a.Permits {
		x.units[p.Resource].Add(-int64(p.Units))
	}
}
