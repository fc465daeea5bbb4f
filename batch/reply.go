package batch

import (
	"fmt"
	"time"

	"github.com/redis/rueidis"
)

// The decoders of the scripts' replies: one type per reply shape, so that
// no caller reads a reply by index arithmetic.

// acquireReply is acquire.lua's reply, {granted, nconflicts, i1, pttl1,
// ..., fence1, ..., fence_granted}: the first `granted` keys of the call
// are held; each conflict is a 1-based position in the call (negated for
// a key reserved for a waiter) and the
// holder's remaining time in ms (-1: no expiry); with fencing, the tokens
// of the granted keys follow, in order.
type acquireReply struct {
	granted   int
	conflicts []replyConflict
	fences    []int64 // empty without fencing
}

type replyConflict struct {
	pos      int // 0-based position in the call
	ttl      time.Duration
	reserved bool // the key is reserved for a waiter
}

// decodeAcquire reads acquire.lua's reply to a call of n keys.
func decodeAcquire(r rueidis.RedisResult, n int) (acquireReply, error) {
	vals, err := r.AsIntSlice()
	if err != nil {
		return acquireReply{}, err
	}
	if len(vals) < 2 || vals[0] < 0 || int(vals[0]) > n || vals[1] < 0 || 2+2*int(vals[1]) > len(vals) {
		return acquireReply{}, fmt.Errorf("malformed acquire reply %v", vals)
	}
	out := acquireReply{granted: int(vals[0])}
	nc := int(vals[1])
	for k := range nc {
		pos, pttl := int(vals[2+2*k]), vals[3+2*k]
		reserved := pos < 0
		if reserved {
			pos = -pos
		}
		pos--
		if pos < 0 || pos >= n {
			return acquireReply{}, fmt.Errorf("malformed acquire reply %v: conflict position %d", vals, pos+1)
		}
		d := time.Duration(pttl) * time.Millisecond
		if pttl < 0 {
			d = -1
		}
		out.conflicts = append(out.conflicts, replyConflict{pos: pos, ttl: d, reserved: reserved})
	}
	out.fences = vals[2+2*nc:]
	return out, nil
}

// fence returns the fencing token of the k-th granted key, 0 without one.
func (a acquireReply) fence(k int) int64 {
	if k < len(a.fences) {
		return a.fences[k]
	}
	return 0
}

// decodePositions reads the reply of release.lua and extend.lua: the
// 1-based positions, in a call of n keys, of the keys the lease did not
// hold, returned 0-based.
func decodePositions(r rueidis.RedisResult, n int) ([]int, error) {
	vals, err := r.AsIntSlice()
	if err != nil {
		return nil, err
	}
	out := make([]int, 0, len(vals))
	for _, p := range vals {
		if p < 1 || int(p) > n {
			return nil, fmt.Errorf("malformed reply %v: position %d of %d keys", vals, p, n)
		}
		out = append(out, int(p)-1)
	}
	return out, nil
}
