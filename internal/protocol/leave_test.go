package protocol

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/slotlock/slotlock/slot"
)

// lineStrategy is a Strategy over an in-memory table that records the
// lines the acquisition waits in and leaves. waits scripts what happens
// during each wait (in order), to the table. mu: the protocol trims and
// leaves in a goroutine of its own while it waits.
type lineStrategy struct {
	mu     sync.Mutex
	holder []string // per key: the holder, "" when free
	waits  []func(f *lineStrategy)
	waited []int // the keys waited for, in order
	left   []int // the keys whose line was left, in order
	inLine map[int]bool
}

func (f *lineStrategy) Attempt(_ context.Context, set *Set, from int, r *Request, _ AttemptOptions) Attempt {
	f.mu.Lock()
	defer f.mu.Unlock()
	a := Attempt{State: make([]KeyState, set.Len())}
	for i := from; i < set.Len(); i++ {
		if f.holder[i] != "" && f.holder[i] != r.Who.Holder {
			a.Conflicts = []Conflict{{Index: i, TTL: time.Second}}
			break
		}
		f.holder[i], a.State[i] = r.Who.Holder, Held
		delete(f.inLine, i) // taking a key leaves its line (acquire.lua mode 'v')
	}
	return a
}

func (f *lineStrategy) Release(_ context.Context, _ *Set, idx []int, who Who) OwnerResult {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, i := range idx {
		if f.holder[i] == who.Holder {
			f.holder[i] = ""
		}
	}
	return OwnerResult{}
}

func (f *lineStrategy) Extend(context.Context, *Set, []int, Who, time.Duration) OwnerResult {
	return OwnerResult{}
}

func (f *lineStrategy) Wait(ctx context.Context, _ *Set, i int, _ Conflict, _ *Request, _ int, _ time.Duration) error {
	f.mu.Lock()
	f.waited = append(f.waited, i)
	f.inLine[i] = true
	if len(f.waits) == 0 {
		f.mu.Unlock()
		<-ctx.Done()
		return context.Cause(ctx)
	}
	w := f.waits[0]
	f.waits = f.waits[1:]
	w(f)
	f.mu.Unlock()
	return nil
}

func (f *lineStrategy) Leave(_ context.Context, _ *Set, i int, _ *Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.left = append(f.left, i)
	delete(f.inLine, i)
}

func (f *lineStrategy) RefreshesHeld() bool { return true }

// TestAWaiterLeavesALineItNoLongerWaitsIn: an acquisition waits in key 1's
// line holding key 0; while it waits, key 0 is lost to another and key 1
// is released. Its next attempt stops at key 0, and it waits there: it
// must leave key 1's line first (a release would hand key 1 to it, and
// the key would stay reserved for a waiter that is not coming). Then it
// gives up while waiting for key 0: it leaves key 0's line too. Nothing
// of it stays in any line. Mutations: no Leave when the wait moves
// (key 1's place stays); no Leave when giving up (key 0's place stays).
func TestAWaiterLeavesALineItNoLongerWaitsIn(t *testing.T) {
	names, err := slot.NewNamer("t")
	if err != nil {
		t.Fatal(err)
	}
	set := NewSet(names, []string{"a", "b"})
	f := &lineStrategy{holder: []string{"", "other"}, inLine: map[int]bool{}}
	f.waits = []func(*lineStrategy){
		func(f *lineStrategy) { f.holder[0], f.holder[1] = "thief", "" },
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	r := &Request{Who: Who{Holder: "w"}, TTL: 10 * time.Second, CleanupTimeout: time.Second}
	_, err = Lock(ctx, f, set, r)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock: %v, want the context's deadline", err)
	}
	if !slices.Equal(f.waited, []int{1, 0}) {
		t.Fatalf("waited for %v, want [1 0]: the case did not arise", f.waited)
	}
	if !slices.Contains(f.left, 1) || !slices.Contains(f.left, 0) {
		t.Errorf("left the lines of %v, want both 1 (moved on) and 0 (gave up)", f.left)
	}
	if len(f.inLine) > 0 {
		t.Errorf("still in the lines of %v", f.inLine)
	}
	for i, h := range f.holder {
		if h == "w" {
			t.Errorf("key %d still held by the acquisition that gave up", i)
		}
	}
}

// TestAWaiterThatTakesTheKeyLeavesNothing: the usual case: the key waited
// for is released, the next attempt takes it (which leaves its line), and
// the acquisition is granted without a Leave. Mutation: leaving the last
// line whatever the attempt took (a Leave of a key the lease holds: a
// wasted call on every contended grant).
func TestAWaiterThatTakesTheKeyLeavesNothing(t *testing.T) {
	names, err := slot.NewNamer("t")
	if err != nil {
		t.Fatal(err)
	}
	set := NewSet(names, []string{"a", "b"})
	f := &lineStrategy{holder: []string{"", "other"}, inLine: map[int]bool{}}
	f.waits = []func(*lineStrategy){func(f *lineStrategy) { f.holder[1] = "" }}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r := &Request{Who: Who{Holder: "w"}, TTL: 10 * time.Second, CleanupTimeout: time.Second}
	if _, err := Lock(ctx, f, set, r); err != nil {
		t.Fatal(err)
	}
	if len(f.left) != 0 || len(f.inLine) != 0 {
		t.Errorf("left %v, still in %v: want neither", f.left, f.inLine)
	}
}
