package bench

import "sync/atomic"

// exclusion is the in-process witness of mutual exclusion: a worker claims
// every key it was told it holds, and a claim that finds another worker's
// mark is a violation, whatever Redis says. It costs one CAS per key, so
// it runs on every timed batch.
type exclusion struct {
	owner []atomic.Int32
}

func newExclusion(size int) *exclusion {
	return &exclusion{owner: make([]atomic.Int32, size)}
}

// claim marks keys idx as held by worker w and returns how many were
// already marked by someone else.
func (x *exclusion) claim(idx []int, w int) (violations int) {
	for _, i := range idx {
		if !x.owner[i].CompareAndSwap(0, int32(w)+1) {
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
