package clustertest

import (
	"fmt"
	"slices"
	"sync"
	"testing"
)

// fencedStore is the kind of downstream store fencing tokens are for: it
// remembers the largest token that wrote each key and refuses a write with a
// smaller one. It lives in the test process, so pausing a Redis node never
// pauses it: a holder that slept through the loss of its lease reaches it
// with a stale token, which is the case fencing exists for.
type fencedStore struct {
	tl  *timeline
	mu  sync.Mutex
	max map[string]int64
	log []storeWrite
}

// storeWrite is one write attempt, accepted or refused.
type storeWrite struct {
	Key      string
	Token    int64
	Holder   int // hold.ID
	At       int64
	Accepted bool
}

func newFencedStore(tl *timeline) *fencedStore {
	return &fencedStore{tl: tl, max: map[string]int64{}}
}

// write stores a value for key under token on behalf of holder, unless a
// larger token has written key before. Equal tokens pass: one holder writes
// many times under its grant.
func (s *fencedStore) write(key string, token int64, holder int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	ok := token >= s.max[key]
	if ok {
		s.max[key] = token
	}
	s.log = append(s.log, storeWrite{Key: key, Token: token, Holder: holder, At: s.tl.now(), Accepted: ok})
	return ok
}

func (s *fencedStore) writes() []storeWrite {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.log)
}

// storeVerdict is what checkStore found.
type storeVerdict struct {
	Accepted, Refused int
	// Stale counts accepted writes of a holder after a write of a holder
	// granted the key later: the store let a stale holder overwrite newer
	// data. Fencing exists to make this zero.
	Stale []string
	// SharedTokens counts tokens that two different holds wrote one key
	// with: the store cannot tell them apart, so fencing failed for them.
	SharedTokens []string
	// RefusedStale counts refused writes of holders whose key had been
	// granted to someone newer: fencing at work.
	RefusedStale int
}

// checkStore replays the store's log against the grant order of the
// history, independently of the store's own rule: for every key, once a
// write of a hold granted later has been accepted, no write of an earlier
// hold may be accepted; and no token may be accepted from two holds.
func checkStore(h *history, s *fencedStore) storeVerdict {
	grantedAt := map[int]int64{}
	for _, g := range h.holds() {
		grantedAt[g.ID] = g.Granted
	}
	var v storeVerdict
	newest := map[string]int{} // key -> holder of the newest grant whose write was accepted
	owner := map[string]int{}  // key/token -> holder that wrote it
	for _, w := range s.writes() {
		if !w.Accepted {
			v.Refused++
			if n, ok := newest[w.Key]; ok && grantedAt[n] > grantedAt[w.Holder] {
				v.RefusedStale++
			}
			continue
		}
		v.Accepted++
		if n, ok := newest[w.Key]; ok && n != w.Holder && grantedAt[n] > grantedAt[w.Holder] {
			v.Stale = append(v.Stale, fmt.Sprintf("key %q: write of #%d (token %d) accepted at %.3f ms after #%d, granted later, had written",
				w.Key, w.Holder, w.Token, ms(w.At), n))
		}
		tk := fmt.Sprintf("%s/%d", w.Key, w.Token)
		if o, ok := owner[tk]; ok && o != w.Holder {
			v.SharedTokens = append(v.SharedTokens, fmt.Sprintf("key %q: token %d accepted from #%d and #%d", w.Key, w.Token, o, w.Holder))
		}
		owner[tk] = w.Holder
		if n, ok := newest[w.Key]; !ok || grantedAt[w.Holder] > grantedAt[n] {
			newest[w.Key] = w.Holder
		}
	}
	return v
}

func (v storeVerdict) log(t testing.TB) {
	t.Helper()
	t.Logf("fenced store: %d writes accepted, %d refused (%d of them from holders superseded by a newer grant); stale writes accepted %d, tokens shared by two holders %d",
		v.Accepted, v.Refused, v.RefusedStale, len(v.Stale), len(v.SharedTokens))
	for i, s := range append(slices.Clone(v.Stale), v.SharedTokens...) {
		if i == 10 {
			break
		}
		t.Log(s)
	}
}
