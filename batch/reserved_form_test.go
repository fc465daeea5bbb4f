package batch

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/slotlock/slotlock/internal/redistest"
	"github.com/slotlock/slotlock/slot"
)

// A lease granted directly to a waiter by reservation holds its keys in
// reserved form, '^' ticket ':' token '/' seq ':' inbox ['!'], until its
// first renewal converts them (docs/proposals/direct-grant.md 3.2). These
// tests run release.lua, extend.lua and guard.lua themselves on values
// written by hand, in both call forms where the script has both: one call
// per node (keys in ARGV) and one per slot (keys in KEYS).

// reservedRig is one cluster, the master of the slot tag {rf}, and the
// names of keys in that slot.
type reservedRig struct {
	ctx   context.Context
	c     *redistest.Cluster
	n     *redistest.Node
	names slot.Namer
	slot  uint16
	inbox string // a channel of the keys' slot: an inbox on their node
	// msgs is what a Locker listening on the inbox hears (hand_off passes
	// over an inbox nobody hears).
	msgs <-chan string
}

func newReservedRig(t *testing.T, prefix string) *reservedRig {
	t.Helper()
	c := redistest.Require(t, cluster)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	names, err := slot.NewNamer(prefix)
	if err != nil {
		t.Fatal(err)
	}
	r := &reservedRig{ctx: ctx, c: c, names: names, slot: slot.KeySlot("{rf}a")}
	if r.n, err = c.NodeForSlot(ctx, r.slot); err != nil {
		t.Fatal(err)
	}
	r.inbox = names.InboxInSlot("L1", r.slot)
	r.msgs = subscribe(ctx, t, r.n, r.inbox)
	return r
}

// lock returns the lock key and queue keys of user key {rf}<name>.
func (r *reservedRig) lock(name string) (lock, q, qd string) {
	k := "{rf}" + name
	q, qd = r.names.QueueKeysInSlot(k, r.slot)
	return r.names.LockKeyInSlot(k, r.slot), q, qd
}

// res is the reservation of waiter (token '/' seq) with ticket 1000 and
// the rig's inbox.
func (r *reservedRig) res(waiter string, marked bool) string {
	v := "^1000:" + waiter + ":" + r.inbox
	if marked {
		v += "!"
	}
	return v
}

func (r *reservedRig) do(t *testing.T, cmd ...string) {
	t.Helper()
	if err := r.n.Do(r.ctx, cmd...).Error(); err != nil {
		t.Fatalf("%q: %v", cmd, err)
	}
}

func (r *reservedRig) get(t *testing.T, k string) (string, int64) {
	t.Helper()
	v, err := r.n.Do(r.ctx, "GET", k).ToString()
	if err != nil && !rueidis.IsRedisNil(err) {
		t.Fatal(err)
	}
	pttl, err := r.n.Do(r.ctx, "PTTL", k).AsInt64()
	if err != nil {
		t.Fatal(err)
	}
	return v, pttl
}

// owner runs an owner-checked script (release.lua, extend.lua: head is
// holder, lease token and, for extend, the ttl) on keys in the given
// form, and returns the positions it reports not held, or its error.
func (r *reservedRig) owner(s *script, perSlot bool, keys []string, head ...string) ([]int64, error) {
	var args []string
	if perSlot {
		args = append([]string{"EVAL", s.slotText, fmt.Sprint(len(keys))}, keys...)
		args = append(args, head...)
		args = append(args, "", fmt.Sprint(len(keys)))
	} else {
		args = append([]string{"EVAL", s.nodeText, "1", keys[0]}, head...)
		args = append(args, keys...)
	}
	return r.n.Do(r.ctx, args...).AsIntSlice()
}

var forms = []struct {
	name    string
	perSlot bool
}{{"node", false}, {"slot", true}}

func TestExtendConvertsTheReservedForm(t *testing.T) {
	// Mutations checked: is_mine ignoring the reserved form (every case
	// of the lease's own reports the key lost); extend setting the held
	// value without the mark (the release after it deletes the key
	// instead of handing it on: the waiter in line is stranded).
	r := newReservedRig(t, "rfext")
	a, qa, qda := r.lock("a")
	b, qb, qdb := r.lock("b")
	extend := func(form bool, keys ...string) ([]int64, error) {
		return r.owner(extendScript, form, keys, "w", "", "30000")
	}
	for _, f := range forms {
		t.Run(f.name, func(t *testing.T) {
			for _, tc := range []struct{ name, v, want string }{
				{"marked", r.res("w/5", true), "w!"},
				{"unmarked", r.res("w/5", false), "w"},
				{"no-seq", r.res("w", true), "w!"}, // an older version's reservation
				{"held", "w!", "w!"},
			} {
				r.do(t, "SET", a, tc.v, "PX", "500")
				lost, err := extend(f.perSlot, a)
				v, pttl := r.get(t, a)
				if err != nil || len(lost) != 0 {
					t.Errorf("%s: extend of %q answered %v %v: want nothing lost", tc.name, tc.v, lost, err)
				}
				if v != tc.want || pttl < 29000 {
					t.Errorf("%s: %q became %q (PTTL %d), want %q with the new expiry", tc.name, tc.v, v, pttl, tc.want)
				}
			}

			// The mark kept: the converted key's release hands it to the
			// waiter in line.
			r.do(t, "SET", a, r.res("w/5", true), "PX", "500")
			r.do(t, "ZADD", qa, "900", "o/3 "+r.inbox)
			r.do(t, "ZADD", qda, "99999999999999", "o/3 "+r.inbox)
			if lost, err := extend(f.perSlot, a); err != nil || len(lost) != 0 {
				t.Fatalf("extend: %v %v", lost, err)
			}
			lost, err := r.owner(releaseScript, f.perSlot, []string{a}, "w", "")
			v, _ := r.get(t, a)
			if err != nil || len(lost) != 0 || v != "^900:o/3:"+r.inbox {
				t.Errorf("release after the conversion: %v %v, value %q: want it handed to o/3", lost, err, v)
			}

			// Not the lease's: another token, or a token the lease's is a
			// prefix of. Nothing written.
			for _, other := range []string{"wX/5", "o/5"} {
				r.do(t, "SET", a, r.res(other, true), "PX", "500")
				lost, err := extend(f.perSlot, a)
				v, pttl := r.get(t, a)
				if err != nil || len(lost) != 1 || lost[0] != 1 {
					t.Errorf("reserved for %s: extend answered %v %v, want key 1 lost", other, lost, err)
				}
				if v != r.res(other, true) || pttl > 500 {
					t.Errorf("reserved for %s: value %q PTTL %d, want it untouched", other, v, pttl)
				}
			}

			// All or nothing: one key another's, the lease's own stays in
			// reserved form with its short expiry.
			r.do(t, "SET", a, r.res("w/5", true), "PX", "500")
			r.do(t, "SET", b, r.res("o/5", false), "PX", "500")
			lost, err = extend(f.perSlot, a, b)
			va, pa := r.get(t, a)
			if err != nil || len(lost) != 1 || lost[0] != 2 {
				t.Errorf("[mine, theirs]: extend answered %v %v, want key 2 lost", lost, err)
			}
			if va != r.res("w/5", true) || pa > 500 {
				t.Errorf("[mine, theirs]: the lease's key became %q (PTTL %d): written although another key was lost", va, pa)
			}
			r.do(t, "DEL", a, b, qa, qda, qb, qdb)
		})
	}
}

func TestReleaseOfTheReservedForm(t *testing.T) {
	// Mutations checked: is_mine accepting any reserved value (the
	// other's reservation is deleted); is_mine ignoring the reserved form
	// (the lease's own reported lost and left).
	r := newReservedRig(t, "rfrel")
	a, qa, qda := r.lock("a")
	msgs := r.msgs
	release := func(perSlot bool) ([]int64, error) {
		return r.owner(releaseScript, perSlot, []string{a}, "w", "")
	}
	for _, f := range forms {
		t.Run(f.name, func(t *testing.T) {
			// Marked: handed to the next entry, which gets its message.
			r.do(t, "SET", a, r.res("w/5", true), "PX", "500")
			r.do(t, "ZADD", qa, "900", "o/3 "+r.inbox)
			r.do(t, "ZADD", qda, "99999999999999", "o/3 "+r.inbox)
			lost, err := release(f.perSlot)
			v, pttl := r.get(t, a)
			if err != nil || len(lost) != 0 {
				t.Errorf("marked: release answered %v %v, want nothing lost", lost, err)
			}
			if v != "^900:o/3:"+r.inbox || pttl > 500 {
				t.Errorf("marked: value %q PTTL %d, want the reservation of o/3 (R)", v, pttl)
			}
			select {
			case m := <-msgs:
				if want := "h " + a + " o/3"; m != want {
					t.Errorf("message %q, want %q", m, want)
				}
			case <-time.After(5 * time.Second):
				t.Error("no hand-off message on the inbox")
			}

			// Unmarked: deleted.
			r.do(t, "SET", a, r.res("w/5", false), "PX", "500")
			lost, err = release(f.perSlot)
			v, _ = r.get(t, a)
			if err != nil || len(lost) != 0 || v != "" {
				t.Errorf("unmarked: release answered %v %v, value %q: want it deleted", lost, err, v)
			}

			// Another's: reported lost, untouched.
			for _, other := range []string{"o/5", "wX/5"} {
				r.do(t, "SET", a, r.res(other, true), "PX", "500")
				lost, err = release(f.perSlot)
				v, _ = r.get(t, a)
				if err != nil || len(lost) != 1 || lost[0] != 1 || v != r.res(other, true) {
					t.Errorf("reserved for %s: release answered %v %v, value %q: want key 1 lost and the value untouched", other, lost, err, v)
				}
			}
			r.do(t, "DEL", a, qa, qda)
		})
	}
}

func TestGuardOnTheReservedForm(t *testing.T) {
	// Guard has the per-slot form only. Mutations checked: is_mine
	// ignoring the reserved form (the lease's own guard refused);
	// accepting any reserved value (the write runs under another's).
	r := newReservedRig(t, "rfgrd")
	a, _, _ := r.lock("a")
	user := "{rf}data"
	guard := func() (string, error) {
		return r.n.Do(r.ctx, "EVAL", guardScript.slotText, "2", a, user, "w", "", "1", "SET", user, "x").ToString()
	}
	r.do(t, "SET", a, r.res("w/5", true), "PX", "500")
	if got, err := guard(); err != nil || got != "OK" {
		t.Errorf("guard on the lease's reservation: %q %v, want the command's OK", got, err)
	}
	if v, _ := r.get(t, user); v != "x" {
		t.Errorf("user key %q, want x", v)
	}
	for _, other := range []string{"o/5", "wX/5"} {
		r.do(t, "DEL", user)
		r.do(t, "SET", a, r.res(other, true), "PX", "500")
		_, err := guard()
		if err == nil || !strings.HasPrefix(err.Error(), lostPrefix+" 1") {
			t.Errorf("guard under %s's reservation: %v, want %s 1", other, err, lostPrefix)
		}
		if v, _ := r.get(t, user); v != "" {
			t.Errorf("guard under %s's reservation wrote %q", other, v)
		}
	}
	r.do(t, "DEL", a, user)
}

// TestExtendConvertMigrating runs extend.lua itself (node form, as the
// engine sends it) for [A, B] on one master: A the lease's reservation,
// marked, in a stable slot; B missing here, its slot MIGRATING away (the
// key moved already). Redis refuses the call at B's read ("non local key")
// and keeps what it wrote before: the conversion of A must not be among
// that, or the engine, which reads an error as nothing written, would
// retry elsewhere with A already turned into a hold. (The per-slot form
// cannot show it: a call declaring a missing key of a migrating slot is
// refused before it runs.) Mutation checked: converting each key as it is
// read.
func TestExtendConvertMigrating(t *testing.T) {
	c := redistest.StartForTest(t, redistest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	names, err := slot.NewNamer("migext")
	if err != nil {
		t.Fatal(err)
	}
	p := newMigratingPair(ctx, t, c, names)
	lockA, lockB := names.LockKey(p.keyA), names.LockKey(p.keyB)
	resA := "^1000:w/5:" + names.InboxInSlot("L1", slot.KeySlot(p.keyA)) + "!"
	for _, cmd := range [][]string{{"SET", lockA, resA, "PX", "30000"}, {"DEL", lockB}} {
		if err := p.src.Do(ctx, cmd...).Error(); err != nil {
			t.Fatal(err)
		}
	}
	p.migrate(ctx, t)
	res, rerr := p.src.Do(ctx, "EVAL", extendScript.nodeText, "1", lockA, "w", "", "60000", lockA, lockB).ToAny()
	p.stable()
	a, _ := p.src.Do(ctx, "GET", lockA).ToString()
	pttl, _ := p.src.Do(ctx, "PTTL", lockA).AsInt64()
	t.Logf("extend [A, B] with B's slot %s migrating: %v %v; A = %q (PTTL %d)", p.sB, res, rerr, a, pttl)
	if rerr == nil {
		t.Fatalf("the call succeeded (%v): the case did not arise (no refusal of B)", res)
	}
	if a != resA || pttl > 30000 {
		t.Errorf("the refused call converted A to %q (PTTL %d): it wrote before the refusal", a, pttl)
	}
	_ = p.src.Do(ctx, "DEL", lockA).Error()
}
