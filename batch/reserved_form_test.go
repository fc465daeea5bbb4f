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

// A lease holds its keys from its grant: a key reserved for a waiter,
// '^' ticket ':' token '/' seq ':' inbox ['!'], is never a lease's, even
// one naming the lease's own token (a late call of its acquisition). These
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

// lock returns the lock key and queue of user key {rf}<name>.
func (r *reservedRig) lock(name string) (lock, q string) {
	k := "{rf}" + name
	return r.names.LockKeyInSlot(k, r.slot), r.names.QueueKeyInSlot(k, r.slot)
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

// TestAReservationIsNotTheLeases: release, extend and guard report a key
// reserved for a waiter lost, and leave it as it is, whoever it names
// (the lease's own token included); a held key of the lease is extended,
// released and guarded. Mutation checked: is_mine taking a reservation
// naming the holder as the lease's (hold.lua; the own-token cases fail).
func TestAReservationIsNotTheLeases(t *testing.T) {
	r := newReservedRig(t, "rfnot")
	a, qa := r.lock("a")
	user := "{rf}data"
	guard := func() (string, error) {
		return r.n.Do(r.ctx, "EVAL", guardScript.slotText, "2", a, user, "w", "", "1", "SET", user, "x").ToString()
	}
	for _, f := range forms {
		t.Run(f.name, func(t *testing.T) {
			for _, who := range []string{"w/5", "w", "wX/5", "o/5"} {
				v := r.res(who, true)
				r.do(t, "SET", a, v, "PX", "500")
				lost, err := r.owner(extendScript, f.perSlot, []string{a}, "w", "", "30000")
				if got, pttl := r.get(t, a); err != nil || len(lost) != 1 || lost[0] != 1 || got != v || pttl > 500 {
					t.Errorf("extend of %s's reservation: %v %v, value %q PTTL %d: want key 1 lost and the value untouched", who, lost, err, got, pttl)
				}
				lost, err = r.owner(releaseScript, f.perSlot, []string{a}, "w", "")
				if got, _ := r.get(t, a); err != nil || len(lost) != 1 || lost[0] != 1 || got != v {
					t.Errorf("release of %s's reservation: %v %v, value %q: want key 1 lost and the value untouched", who, lost, err, got)
				}
				if !f.perSlot { // guard has the per-slot form only
					r.do(t, "DEL", user)
					_, err := guard()
					if err == nil || !strings.HasPrefix(err.Error(), lostPrefix+" 1") {
						t.Errorf("guard under %s's reservation: %v, want %s 1", who, err, lostPrefix)
					}
					if got, _ := r.get(t, user); got != "" {
						t.Errorf("guard under %s's reservation wrote %q", who, got)
					}
				}
			}
			// The lease's held key, marked: extended, guarded, and its
			// release hands it to the waiter in line.
			r.do(t, "SET", a, "w!", "PX", "500")
			if lost, err := r.owner(extendScript, f.perSlot, []string{a}, "w", "", "30000"); err != nil || len(lost) != 0 {
				t.Fatalf("extend of the held key: %v %v", lost, err)
			}
			if v, pttl := r.get(t, a); v != "w!" || pttl < 29000 {
				t.Errorf("the held key after extend: %q PTTL %d", v, pttl)
			}
			if got, err := guard(); err != nil || got != "OK" {
				t.Errorf("guard on the held key: %q %v, want the command's OK", got, err)
			}
			r.do(t, "ZADD", qa, "900", "o/3 "+r.inbox)
			lost, err := r.owner(releaseScript, f.perSlot, []string{a}, "w", "")
			if v, _ := r.get(t, a); err != nil || len(lost) != 0 || v != "^900:o/3:"+r.inbox {
				t.Errorf("release of the held key: %v %v, value %q: want it handed to o/3", lost, err, v)
			}
			select {
			case m := <-r.msgs:
				if want := "h " + a + " o/3"; m != want {
					t.Errorf("message %q, want %q", m, want)
				}
			case <-time.After(5 * time.Second):
				t.Error("no hand-off message on the inbox")
			}
			r.do(t, "DEL", a, qa, user)
		})
	}
}
