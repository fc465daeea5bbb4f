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

	"github.com/slotlock/slotlock"
)

// hold is one lease as the history sees it: from the grant until the holder
// stopped counting on it.
type hold struct {
	ID    int // 1, 2, ...: the porcupine holder id
	Owner string
	Token string
	Keys  []string // exclusive keys
	// Shared and Permits are what a Locker.Acquire request held beside
	// its exclusive keys.
	Shared  []string
	Permits []slotlock.Permit
	Fences  map[string]int64 // with Options.Fencing
	// Call is the earlier of the moment Lock (TryLock, Acquire) was called
	// and Lease.Deadline minus the TTL (when the granting attempt was
	// sent), Granted when it returned: the grant happened on the server
	// somewhere in between. Every grant's Deadline is a TTL after its
	// granting send, so the earlier of the two is the Lock call: a bound
	// that holds whatever the Deadline says (the window includes the
	// wait, which costs the fencing-order check the pairs whose windows
	// overlap).
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
// and checks them: no exclusive hold of a key overlaps another hold of it
// (exclusive or shared), no resource has more permit units held at once
// than its limit, and fencing tokens grow in grant order.
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

// granted records a lease the moment Lock or TryLock returned it; called is
// when Lock or TryLock was called. ttl is the Locker's TTL: Deadline minus
// ttl is when the granting attempt was sent (see hold.Call).
func (h *history) granted(owner string, le recordedLease, called time.Time, ttl time.Duration) *hold {
	return h.add(owner, le, le.Keys(), called, ttl, func(*hold) {})
}

// grantedRequest records a lease the moment Locker.Acquire returned it for
// req (whose TTL, or else the Locker's, is ttl): its exclusive keys, shared
// keys and permits apart, as Lease.Keys lists them together.
func (h *history) grantedRequest(owner string, le recordedLease, req slotlock.Request, called time.Time, ttl time.Duration) *hold {
	return h.add(owner, le, slices.Clone(req.Exclusive), called, ttl, func(g *hold) {
		g.Shared = slices.Clone(req.Shared)
		g.Permits = slices.Clone(req.Permits)
	})
}

func (h *history) add(owner string, le recordedLease, keys []string, called time.Time, ttl time.Duration, more func(*hold)) *hold {
	now := h.tl.now()
	g := &hold{
		Owner:   owner,
		Token:   le.Token(),
		Keys:    keys,
		Call:    h.tl.at(minTime(called, le.Deadline().Add(-ttl))),
		Granted: now,
	}
	more(g)
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

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
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
	shared  bool  // a shared hold (Locker.Acquire)
	fence   int64 // exclusive acquire with fencing; 0 otherwise
}

// lockState is the sequential specification of one key's lock: its
// exclusive holder (0: none), how many shared holders it has, and the
// largest fencing token granted so far.
type lockState struct {
	holder  int
	readers int
	fence   int64
}

// lockModel is a reader-writer lock per key as porcupine sees it: an
// exclusive acquire is legal only on a free lock (no holder, no reader)
// and, with fencing, with a token above every earlier grant's; a shared
// acquire whenever no exclusive holder has it; a release only by a holder.
// A history of holds is linearizable exactly when, per key, the [grant
// returned, holder stopped] intervals can be put in one order consistent
// with real time and tokens. Readers are counted, not named: each holder's
// release follows its own grant in real time, so the count is right.
func lockModel(fencing bool) porcupine.Model {
	return porcupine.Model{
		Init: func() any { return lockState{} },
		Step: func(state, input, _ any) (bool, any) {
			st, in := state.(lockState), input.(lockInput)
			switch {
			case in.acquire && in.shared:
				if st.holder != 0 {
					return false, st
				}
				st.readers++
				return true, st
			case in.acquire:
				if st.holder != 0 || st.readers > 0 || fencing && in.fence <= st.fence {
					return false, st
				}
				return true, lockState{holder: in.holder, fence: max(st.fence, in.fence)}
			case in.shared:
				if st.readers == 0 {
					return false, st
				}
				st.readers--
				return true, st
			}
			if st.holder != in.holder {
				return false, st
			}
			return true, lockState{fence: st.fence}
		},
		DescribeOperation: func(input, _ any) string {
			in := input.(lockInput)
			kind := ""
			if in.shared {
				kind = "shared "
			}
			if in.acquire {
				return fmt.Sprintf("%sacquire by #%d, token %d", kind, in.holder, in.fence)
			}
			return fmt.Sprintf("end of %s#%d", kind, in.holder)
		},
		DescribeState: func(state any) string {
			st := state.(lockState)
			switch {
			case st.holder != 0:
				return fmt.Sprintf("#%d (token %d)", st.holder, st.fence)
			case st.readers > 0:
				return fmt.Sprintf("%d readers (token %d)", st.readers, st.fence)
			}
			return fmt.Sprintf("free (token %d)", st.fence)
		},
	}
}

// permitInput is one operation on one resource in permitModel.
type permitInput struct {
	acquire bool
	holder  int
	units   int64
}

// permitModel is a counted resource of limit units as porcupine sees it
// (the state is the units in use): an acquire is legal only when its units
// fit beside those in use.
func permitModel(limit int64) porcupine.Model {
	return porcupine.Model{
		Init: func() any { return int64(0) },
		Step: func(state, input, _ any) (bool, any) {
			used, in := state.(int64), input.(permitInput)
			if !in.acquire {
				return true, used - in.units
			}
			if used+in.units > limit {
				return false, used
			}
			return true, used + in.units
		},
		DescribeOperation: func(input, _ any) string {
			in := input.(permitInput)
			if in.acquire {
				return fmt.Sprintf("#%d takes %d", in.holder, in.units)
			}
			return fmt.Sprintf("#%d gives back %d", in.holder, in.units)
		},
		DescribeState: func(state any) string {
			return fmt.Sprintf("%d of %d in use", state.(int64), limit)
		},
	}
}

// sharedOn reports whether g held key shared.
func (g *hold) sharedOn(key string) bool { return slices.Contains(g.Shared, key) }

// overlap is a double grant: b was granted a key while a still counted on
// it, one of them (at least) exclusively.
type overlap struct {
	Key    string
	A, B   *hold
	Window time.Duration // how long b's grant preceded a's end
}

func (o overlap) String() string {
	return fmt.Sprintf("key %q: #%d (%s, %s, %s, token %d) held [%.3f ms, %.3f ms], #%d (%s, %s, token %d) granted at %.3f ms: %v before the first ended",
		o.Key, o.A.ID, o.A.Owner, o.A.How, kindOn(o.A, o.Key), o.A.Fences[o.Key], ms(o.A.Granted), ms(o.A.End),
		o.B.ID, o.B.Owner, kindOn(o.B, o.Key), o.B.Fences[o.Key], ms(o.B.Granted), o.Window)
}

func kindOn(g *hold, key string) string {
	if g.sharedOn(key) {
		return "shared"
	}
	return "exclusive"
}

// excess is a moment when the holds of a resource that all counted on it
// held more units than its limit.
type excess struct {
	Resource     string
	At           int64 // the grant that went over
	Units, Limit int64
	Holds        []int
}

func (x excess) String() string {
	return fmt.Sprintf("resource %q: %d units of %d held at %.3f ms by #%v", x.Resource, x.Units, x.Limit, ms(x.At), x.Holds)
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
	// Holds counted; Keys and Resources checked.
	Holds, Keys, Resources int
	// Illegal lists the keys and resources whose history porcupine found
	// not linearizable; Unknown those it could not decide in time.
	Illegal, Unknown []string
	Overlaps         []overlap
	Excesses         []excess
	Inversions       []inversion
	Open             int // holds never ended: a bug of the scenario
}

// Violations counts the keys and resources with a non-linearizable history.
func (v verdict) Violations() int { return len(v.Illegal) }

// check runs porcupine per key and per resource (each is its own
// partition) and, for those it rejects, finds the overlapping holds, the
// token inversions and the units over the limit to print. Porcupine gives
// the verdict; the scans only explain.
func (h *history) check(t testing.TB, fencing bool) verdict {
	all := h.holds()
	byKey := map[string][]*hold{}
	byRes := map[string][]*hold{}
	limits := map[string]int64{}
	var v verdict
	for _, g := range all {
		if !g.ended {
			v.Open++
			continue
		}
		for _, k := range g.Keys {
			byKey[k] = append(byKey[k], g)
		}
		for _, k := range g.Shared {
			byKey[k] = append(byKey[k], g)
		}
		for _, p := range g.Permits {
			byRes[p.Resource] = append(byRes[p.Resource], g)
			limits[p.Resource] = p.Limit // one limit per resource: a request with another is refused
		}
	}
	v.Holds, v.Keys, v.Resources = len(all), len(byKey), len(byRes)
	model := lockModel(fencing)
	for _, k := range sortedKeys(byKey) {
		hs := byKey[k]
		ops := make([]porcupine.Operation, 0, 2*len(hs))
		for _, g := range hs {
			in := lockInput{acquire: true, holder: g.ID, shared: g.sharedOn(k)}
			if fencing && !in.shared {
				in.fence = g.Fences[k]
			}
			out := lockInput{holder: g.ID, shared: in.shared}
			ops = append(ops,
				porcupine.Operation{ClientId: g.ID, Input: in, Call: g.Call, Return: g.Granted},
				porcupine.Operation{ClientId: g.ID, Input: out, Call: g.End, Return: g.EndRet},
			)
		}
		if !h.decide(t, &v, k, model, ops) {
			ov, inv := explain(k, hs, fencing)
			v.Overlaps = append(v.Overlaps, ov...)
			v.Inversions = append(v.Inversions, inv...)
		}
	}
	for _, r := range sortedKeys(byRes) {
		hs := byRes[r]
		ops := make([]porcupine.Operation, 0, 2*len(hs))
		for _, g := range hs {
			u := unitsOf(g, r)
			ops = append(ops,
				porcupine.Operation{ClientId: g.ID, Input: permitInput{acquire: true, holder: g.ID, units: u}, Call: g.Call, Return: g.Granted},
				porcupine.Operation{ClientId: g.ID, Input: permitInput{holder: g.ID, units: u}, Call: g.End, Return: g.EndRet},
			)
		}
		if !h.decide(t, &v, r, permitModel(limits[r]), ops) {
			v.Excesses = append(v.Excesses, explainPermits(r, hs, limits[r])...)
		}
	}
	return v
}

// decide runs porcupine on one partition's operations and records an
// undecided or illegal one in v (with a visualization of the first few
// illegal ones). It reports whether the partition was linearizable or
// undecided, i.e. whether there is nothing to explain.
func (h *history) decide(t testing.TB, v *verdict, name string, model porcupine.Model, ops []porcupine.Operation) bool {
	res, info := porcupine.CheckOperationsVerbose(model, ops, 30*time.Second)
	switch res {
	case porcupine.Ok:
		return true
	case porcupine.Unknown:
		v.Unknown = append(v.Unknown, name)
		return true
	}
	v.Illegal = append(v.Illegal, name)
	if len(v.Illegal) <= 3 {
		file := strings.NewReplacer("/", "-", " ", "_").Replace(t.Name())
		path := filepath.Join(os.TempDir(), fmt.Sprintf("slotlock-chaos-%s-%d.html", file, len(v.Illegal)))
		if err := porcupine.VisualizePath(model, info, path); err == nil {
			t.Logf("porcupine: %q is not linearizable; visualization in %s", name, path)
		}
	}
	return false
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// unitsOf returns the units g held of resource r.
func unitsOf(g *hold, r string) int64 {
	for _, p := range g.Permits {
		if p.Resource == r {
			return p.Units
		}
	}
	return 0
}

// explain finds, for one key, the pairs of holds that overlap with at least
// one of them exclusive, and the exclusive grants whose token did not
// grow, in grant order.
func explain(key string, hs []*hold, fencing bool) ([]overlap, []inversion) {
	s := slices.Clone(hs)
	slices.SortFunc(s, func(a, b *hold) int { return cmpInt64(a.Granted, b.Granted) })
	var ovs []overlap
	for i, a := range s {
		for _, b := range s[i+1:] {
			if b.Granted >= a.End {
				break // sorted by grant: no later one overlaps a either
			}
			if b.End < a.Granted || a.sharedOn(key) && b.sharedOn(key) {
				continue // b's lease ran out before b even had it, or two readers
			}
			ovs = append(ovs, overlap{Key: key, A: a, B: b, Window: time.Duration(a.End - b.Granted)})
		}
	}
	var invs []inversion
	if fencing {
		var p *hold
		for _, n := range s {
			if n.sharedOn(key) {
				continue
			}
			if p != nil && n.Fences[key] <= p.Fences[key] {
				invs = append(invs, inversion{Key: key, Prev: p, Next: n, PrevT: p.Fences[key], NexT: n.Fences[key]})
			}
			p = n
		}
	}
	return ovs, invs
}

// explainPermits finds, for one resource, the grants after which the holds
// that all counted on it at once held more than limit units.
func explainPermits(res string, hs []*hold, limit int64) []excess {
	var out []excess
	for _, n := range hs {
		x := excess{Resource: res, At: n.Granted, Limit: limit}
		for _, g := range hs {
			if g.Granted <= n.Granted && n.Granted < g.End {
				x.Units += unitsOf(g, res)
				x.Holds = append(x.Holds, g.ID)
			}
		}
		if x.Units > limit {
			out = append(out, x)
		}
	}
	return out
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
	t.Logf("history: %d holds over %d keys and %d resources; non-linearizable keys and resources %d, undecided %d, overlapping pairs %d, units over the limit %d, token inversions %d, open holds %d",
		v.Holds, v.Keys, v.Resources, len(v.Illegal), len(v.Unknown), len(v.Overlaps), len(v.Excesses), len(v.Inversions), v.Open)
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
	for i, x := range v.Excesses {
		if i == 10 {
			t.Logf("... and %d more over the limit", len(v.Excesses)-i)
			break
		}
		t.Logf("over the limit: %v", x)
	}
}

// requireSafe fails the test unless the history is linearizable for every
// key, has no open hold, and was decided for every key.
func (v verdict) requireSafe(t testing.TB) {
	t.Helper()
	v.log(t)
	if len(v.Illegal) > 0 || len(v.Unknown) > 0 || v.Open > 0 {
		t.Errorf("history not safe: %d keys or resources with overlapping holds, shrinking tokens or units over the limit, %d undecided, %d open holds",
			len(v.Illegal), len(v.Unknown), v.Open)
	}
}

// TestCheckHistory runs the checker, without a cluster, on histories of
// exclusive holds, shared holds and permits with a known verdict, so that
// a checker that sees nothing cannot pass a scenario.
func TestCheckHistory(t *testing.T) {
	mk := func(id int, from, to int64, excl, shared []string, units int64) *hold {
		g := &hold{ID: id, Keys: excl, Shared: shared, Call: from - 1, Granted: from, End: to, EndRet: to + 1, ended: true}
		if units > 0 {
			g.Permits = []slotlock.Permit{{Resource: "r", Units: units, Limit: 3}}
		}
		return g
	}
	k := []string{"k"}
	for _, tc := range []struct {
		name               string
		hs                 []*hold
		illegal            int
		overlaps, excesses int
	}{
		{"readers together", []*hold{mk(1, 10, 50, nil, k, 0), mk(2, 20, 60, nil, k, 0), mk(3, 30, 40, nil, k, 0)}, 0, 0, 0},
		{"writer after readers", []*hold{mk(1, 10, 50, nil, k, 0), mk(2, 20, 60, nil, k, 0), mk(3, 70, 80, k, nil, 0)}, 0, 0, 0},
		{"writer among readers", []*hold{mk(1, 10, 50, nil, k, 0), mk(2, 30, 60, k, nil, 0)}, 1, 1, 0},
		{"reader inside a writer", []*hold{mk(1, 10, 50, k, nil, 0), mk(2, 20, 30, nil, k, 0)}, 1, 1, 0},
		{"two writers", []*hold{mk(1, 10, 50, k, nil, 0), mk(2, 20, 60, k, nil, 0)}, 1, 1, 0},
		{"permits at the limit", []*hold{mk(1, 10, 50, nil, nil, 2), mk(2, 20, 60, nil, nil, 1), mk(3, 55, 70, nil, nil, 2)}, 0, 0, 0},
		{"permits over the limit", []*hold{mk(1, 10, 50, nil, nil, 2), mk(2, 20, 60, nil, nil, 2)}, 1, 0, 1},
		{"a writer with a permit, reader and permits apart", []*hold{mk(1, 10, 50, k, nil, 3), mk(2, 60, 70, nil, k, 3)}, 0, 0, 0},
	} {
		h := newHistory(newTimeline())
		h.hs = tc.hs
		v := h.check(t, false)
		if len(v.Illegal) != tc.illegal || len(v.Overlaps) != tc.overlaps || len(v.Excesses) != tc.excesses || len(v.Unknown) > 0 {
			t.Errorf("%s: %d illegal, %d overlaps, %d over the limit, %d undecided; want %d, %d, %d, 0", tc.name,
				len(v.Illegal), len(v.Overlaps), len(v.Excesses), len(v.Unknown), tc.illegal, tc.overlaps, tc.excesses)
		}
	}
}
