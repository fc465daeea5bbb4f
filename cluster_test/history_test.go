package clustertest

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// hold is one lease as the history sees it: from the grant until the holder
// stopped counting on it.
type hold struct {
	ID     int // 1, 2, ...: the porcupine holder id
	Owner  string
	Token  string
	Keys   []string
	Fences map[string]int64 // with Options.Fencing
	// Call is when the granting attempt was sent (Lease.Deadline minus the
	// TTL), Granted when Lock or TryLock returned: the grant happened on
	// the server somewhere in between.
	Call, Granted int64
	// End is when the holder stopped counting on the keys: the earliest of
	// its Release call, the moment it saw the lease end (Done), and the
	// lease's deadline (the holder knows its lease is over then, renewed
	// or not). EndRet is when that end was complete on the client (Release
	// returned); for a loss or an expiry it equals End.
	End, EndRet int64
	How         string // "released", "lost", "expired"
	// Renews is set for leases the watchdog renews.
	Renews bool
	ended  bool
}

// history records every grant and every end of a scenario on one timeline
// and checks them: no two holds of one key overlap, and fencing tokens grow
// in grant order.
type history struct {
	tl *timeline
	mu sync.Mutex
	hs []*hold
}

func newHistory(tl *timeline) *history { return &history{tl: tl} }

// recordedLease is what the history reads of a lease: a *slotlock.Lease, or
// a quorum lease seen through quorumView (quorum_test.go).
type recordedLease interface {
	Token() string
	Keys() []string
	Deadline() time.Time
	FencingToken(key string) (int64, bool)
}

// granted records a lease the moment Lock or TryLock returned it. ttl is
// the Locker's TTL: Deadline minus ttl is when the granting attempt was sent.
func (h *history) granted(owner string, le recordedLease, ttl time.Duration) *hold {
	now := h.tl.now()
	g := &hold{
		Owner:   owner,
		Token:   le.Token(),
		Keys:    le.Keys(),
		Call:    h.tl.at(le.Deadline().Add(-ttl)),
		Granted: now,
	}
	for _, k := range g.Keys {
		if f, ok := le.FencingToken(k); ok {
			if g.Fences == nil {
				g.Fences = make(map[string]int64, len(g.Keys))
			}
			g.Fences[k] = f
		}
	}
	h.mu.Lock()
	g.ID = len(h.hs) + 1
	h.hs = append(h.hs, g)
	h.mu.Unlock()
	return g
}

// ended records that the holder stopped counting on g at stop (a Release
// call, or the moment it saw Done), with ret when that was complete, and
// the lease's deadline as it was then.
func (h *history) ended(g *hold, le recordedLease, stop, ret int64, how string) {
	deadline := h.tl.at(le.Deadline())
	h.mu.Lock()
	defer h.mu.Unlock()
	if g.ended {
		return
	}
	g.ended = true
	g.End, g.EndRet, g.How = stop, max(ret, stop), how
	if deadline < stop {
		g.End, g.EndRet, g.How = deadline, max(ret, deadline), "expired"
	}
}

func (h *history) holds() []*hold {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.hs)
}

// grants returns the number of leases recorded.
func (h *history) grants() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.hs)
}

// lockInput is one operation on one key's lock in the porcupine model.
type lockInput struct {
	acquire bool
	holder  int
	fence   int64 // acquire with fencing; 0 otherwise
}

// lockState is the sequential specification of one key's lock: who holds
// it (0: nobody) and the largest fencing token granted so far.
type lockState struct {
	holder int
	fence  int64
}

// lockModel is a mutual-exclusion lock per key as porcupine sees it: an
// acquire is legal only on a free lock and, with fencing, with a token above
// every earlier grant's; a release only by the holder. A history of holds is
// linearizable exactly when, per key, the [grant returned, holder stopped]
// intervals can be put in one order consistent with real time and tokens.
func lockModel(fencing bool) porcupine.Model {
	return porcupine.Model{
		Init: func() any { return lockState{} },
		Step: func(state, input, _ any) (bool, any) {
			st, in := state.(lockState), input.(lockInput)
			if in.acquire {
				if st.holder != 0 || fencing && in.fence <= st.fence {
					return false, st
				}
				return true, lockState{holder: in.holder, fence: max(st.fence, in.fence)}
			}
			if st.holder != in.holder {
				return false, st
			}
			return true, lockState{fence: st.fence}
		},
		DescribeOperation: func(input, _ any) string {
			in := input.(lockInput)
			if in.acquire {
				return fmt.Sprintf("acquire by #%d, token %d", in.holder, in.fence)
			}
			return fmt.Sprintf("end of #%d", in.holder)
		},
		DescribeState: func(state any) string {
			st := state.(lockState)
			if st.holder == 0 {
				return fmt.Sprintf("free (token %d)", st.fence)
			}
			return fmt.Sprintf("#%d (token %d)", st.holder, st.fence)
		},
	}
}

// overlap is a double grant: b was granted a key while a still counted on it.
type overlap struct {
	Key    string
	A, B   *hold
	Window time.Duration // how long b's grant preceded a's end
}

func (o overlap) String() string {
	return fmt.Sprintf("key %q: #%d (%s, %s, token %d) held [%.3f ms, %.3f ms], #%d (%s, token %d) granted at %.3f ms: %v before the first ended",
		o.Key, o.A.ID, o.A.Owner, o.A.How, o.A.Fences[o.Key], ms(o.A.Granted), ms(o.A.End),
		o.B.ID, o.B.Owner, o.B.Fences[o.Key], ms(o.B.Granted), o.Window)
}

// inversion is a grant whose fencing token is not above an earlier grant's.
type inversion struct {
	Key         string
	Prev, Next  *hold
	PrevT, NexT int64
}

func (v inversion) String() string {
	return fmt.Sprintf("key %q: #%d (%s) got token %d at %.3f ms after #%d (%s) got %d at %.3f ms",
		v.Key, v.Next.ID, v.Next.Owner, v.NexT, ms(v.Next.Granted), v.Prev.ID, v.Prev.Owner, v.PrevT, ms(v.Prev.Granted))
}

// verdict is what the checker found.
type verdict struct {
	Holds, Keys int
	// Illegal lists the keys whose history porcupine found not
	// linearizable; Unknown the keys it could not decide in time.
	Illegal, Unknown []string
	Overlaps         []overlap
	Inversions       []inversion
	Open             int // holds never ended: a bug of the scenario
}

// Violations counts the keys with a non-linearizable history.
func (v verdict) Violations() int { return len(v.Illegal) }

// check runs porcupine per key (the lock of each key is its own partition)
// and, for the keys it rejects, finds the overlapping holds and the token
// inversions to print. Porcupine gives the verdict; the scan only explains.
func (h *history) check(t testing.TB, fencing bool) verdict {
	all := h.holds()
	byKey := map[string][]*hold{}
	var v verdict
	for _, g := range all {
		if !g.ended {
			v.Open++
			continue
		}
		for _, k := range g.Keys {
			byKey[k] = append(byKey[k], g)
		}
	}
	v.Holds, v.Keys = len(all), len(byKey)
	keys := make([]string, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	model := lockModel(fencing)
	for _, k := range keys {
		hs := byKey[k]
		ops := make([]porcupine.Operation, 0, 2*len(hs))
		for _, g := range hs {
			fence := int64(0)
			if fencing {
				fence = g.Fences[k]
			}
			ops = append(ops,
				porcupine.Operation{ClientId: g.ID, Input: lockInput{acquire: true, holder: g.ID, fence: fence}, Call: g.Call, Return: g.Granted},
				porcupine.Operation{ClientId: g.ID, Input: lockInput{holder: g.ID}, Call: g.End, Return: g.EndRet},
			)
		}
		res, info := porcupine.CheckOperationsVerbose(model, ops, 30*time.Second)
		switch res {
		case porcupine.Ok:
			continue
		case porcupine.Unknown:
			v.Unknown = append(v.Unknown, k)
			continue
		}
		v.Illegal = append(v.Illegal, k)
		ov, inv := explain(k, hs, fencing)
		v.Overlaps = append(v.Overlaps, ov...)
		v.Inversions = append(v.Inversions, inv...)
		if len(v.Illegal) <= 3 {
			name := strings.NewReplacer("/", "-", " ", "_").Replace(t.Name())
			path := filepath.Join(os.TempDir(), fmt.Sprintf("slotlock-chaos-%s-%d.html", name, len(v.Illegal)))
			if err := porcupine.VisualizePath(model, info, path); err == nil {
				t.Logf("porcupine: key %q is not linearizable; visualization in %s", k, path)
			}
		}
	}
	return v
}

// explain finds, for one key, the pairs of holds that overlap and the
// grants whose token did not grow, in grant order.
func explain(key string, hs []*hold, fencing bool) ([]overlap, []inversion) {
	s := slices.Clone(hs)
	slices.SortFunc(s, func(a, b *hold) int { return cmpInt64(a.Granted, b.Granted) })
	var ovs []overlap
	for i, a := range s {
		for _, b := range s[i+1:] {
			if b.Granted >= a.End {
				break // sorted by grant: no later one overlaps a either
			}
			if b.End < a.Granted {
				continue // b's lease ran out before b even had it
			}
			ovs = append(ovs, overlap{Key: key, A: a, B: b, Window: time.Duration(a.End - b.Granted)})
		}
	}
	var invs []inversion
	if fencing {
		for i := 1; i < len(s); i++ {
			p, n := s[i-1], s[i]
			if n.Fences[key] <= p.Fences[key] {
				invs = append(invs, inversion{Key: key, Prev: p, Next: n, PrevT: p.Fences[key], NexT: n.Fences[key]})
			}
		}
	}
	return ovs, invs
}

// fenceShift is 2^32: a fencing token is epoch * 2^32 + n, the epoch being
// the config epoch of a master that served the key's slot
// (batch/scripts/fence.lua).
const fenceShift = 1 << 32

// fenceViolation is a pair of grants of one key that breaks the fencing
// property of docs/safety.md ("Fencing across failover"): the same token
// twice, or a grant that started after another was granted and got a
// token that is not larger, without being a grant of a deposed master.
type fenceViolation struct {
	Key        string
	Prev, Next *hold
	Why        string
}

func (v fenceViolation) String() string {
	return fmt.Sprintf("key %q: %s: #%d (%s) got token %d (epoch %d) at %.3f ms, #%d (%s) granted %d (epoch %d) at %.3f ms before",
		v.Key, v.Why, v.Next.ID, v.Next.Owner, v.Next.Fences[v.Key], v.Next.Fences[v.Key]/fenceShift, ms(v.Next.Granted),
		v.Prev.ID, v.Prev.Owner, v.Prev.Fences[v.Key], v.Prev.Fences[v.Key]/fenceShift, ms(v.Prev.Granted))
}

// fencing is what checkFencing found.
type fencing struct {
	Violations []fenceViolation
	// Stale are the grants of a deposed master made after a grant of its
	// successor: a smaller token, as the property demands, so a fenced
	// store refuses their writes once the newer holder wrote.
	Stale []fenceViolation
}

// checkFencing checks every pair of grants of each key: no two carry the
// same token; and a grant that was sent after another was granted carries
// a larger token, except when its token's epoch is one a promotion
// deposed (deposed: config epochs of masters whose replica took over) and
// is below the other's epoch. Unlike porcupine's model it accepts double
// grants (asynchronous replication makes them possible without
// MinReplicas) and checks what a store relies on instead.
func (h *history) checkFencing(deposed map[int64]bool) fencing {
	byKey := map[string][]*hold{}
	for _, g := range h.holds() {
		for _, k := range g.Keys {
			byKey[k] = append(byKey[k], g)
		}
	}
	var out fencing
	for k, hs := range byKey {
		seen := make(map[int64]*hold, len(hs))
		for _, n := range hs {
			tn := n.Fences[k]
			if p, dup := seen[tn]; dup {
				out.Violations = append(out.Violations, fenceViolation{Key: k, Prev: p, Next: n, Why: "token handed out twice"})
			}
			seen[tn] = n
			for _, p := range hs {
				tp := p.Fences[k]
				if p == n || p.Granted >= n.Call || tn > tp {
					continue
				}
				x := fenceViolation{Key: k, Prev: p, Next: n}
				if en := tn / fenceShift; deposed[en] && en < tp/fenceShift {
					x.Why = "stale grant of a deposed master"
					out.Stale = append(out.Stale, x)
					continue
				}
				if tn != tp {
					x.Why = "token below an earlier grant's"
					out.Violations = append(out.Violations, x)
				}
			}
		}
	}
	return out
}

func cmpInt64(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// log prints what the checker found, a few lines of each kind.
func (v verdict) log(t testing.TB) {
	t.Helper()
	t.Logf("history: %d holds over %d keys; non-linearizable keys %d, undecided %d, overlapping pairs %d, token inversions %d, open holds %d",
		v.Holds, v.Keys, len(v.Illegal), len(v.Unknown), len(v.Overlaps), len(v.Inversions), v.Open)
	for i, o := range v.Overlaps {
		if i == 10 {
			t.Logf("... and %d more overlaps", len(v.Overlaps)-i)
			break
		}
		t.Logf("overlap: %v", o)
	}
	for i, x := range v.Inversions {
		if i == 10 {
			t.Logf("... and %d more inversions", len(v.Inversions)-i)
			break
		}
		t.Logf("inversion: %v", x)
	}
}

// requireSafe fails the test unless the history is linearizable for every
// key, has no open hold, and was decided for every key.
func (v verdict) requireSafe(t testing.TB) {
	t.Helper()
	v.log(t)
	if len(v.Illegal) > 0 || len(v.Unknown) > 0 || v.Open > 0 {
		t.Errorf("history not safe: %d keys with overlapping holds or shrinking tokens, %d undecided, %d open holds",
			len(v.Illegal), len(v.Unknown), v.Open)
	}
}
