package batch

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/slotlock/slotlock/internal/redistest"
	"github.com/slotlock/slotlock/slot"
)

// TestSharedAcquireMigratingSetRefusedFirst runs shared_acquire.lua
// itself (node form, as the engine sends it, with no retry or cleanup
// after it) for [A, B] on one master: A free in a stable slot, B a shared
// key whose slot is MIGRATING on this node and whose holders set is not
// here (the set form '~' with its set moved away, or one holder that a
// second reader turns into the set form). Redis 7.0 refuses a script's
// command on a missing key of a migrating slot ("non local key") and
// keeps what the script wrote before it; the engine reads an error as
// nothing written. So the call must fail before its first write: A must
// not be left with the reader in it.
func TestSharedAcquireMigratingSetRefusedFirst(t *testing.T) {
	c := redistest.StartForTest(t, redistest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	names, err := slot.NewNamer("migset")
	if err != nil {
		t.Fatal(err)
	}
	p := newMigratingPair(ctx, t, c, names)
	src, keyA, keyB, sB := p.src, p.keyA, p.keyB, p.sB
	lockA, lockB := names.LockKey(keyA), names.LockKey(keyB)
	setA := names.SharedKeyInSlot(keyA, slot.KeySlot(keyA))
	setB := names.SharedKeyInSlot(keyB, slot.KeySlot(keyB))
	stable := p.stable

	for _, tc := range []struct{ name, b string }{
		{"set-form", "~"},           // the holders set moved away, the lock key not yet
		{"second-reader", "~other"}, // a set that does not exist yet
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, cmd := range [][]string{{"DEL", lockA}, {"SET", lockB, tc.b, "PX", "30000"}} {
				if err := src.Do(ctx, cmd...).Error(); err != nil {
					t.Fatal(err)
				}
			}
			p.migrate(ctx, t)
			args := []string{"EVAL", sharedAcquireScript.nodeText, "1", lockA,
				"me", "", "10000", "a", "s", lockA, lockB}
			res, rerr := src.Do(ctx, args...).ToAny()
			stable()
			a, aerr := src.Do(ctx, "EXISTS", lockA).AsInt64()
			sa, _ := src.Do(ctx, "EXISTS", setA).AsInt64()
			b, _ := src.Do(ctx, "GET", lockB).ToString()
			t.Logf("shared_acquire [A, B] with B's slot %s migrating: %v %v; A exists %d (%v), its set %d; B = %q", sB, res, rerr, a, aerr, sa, b)
			if rerr == nil {
				t.Fatalf("the call succeeded (%v): the case did not arise (no refusal of B's holders set)", res)
			}
			if aerr != nil || a != 0 || sa != 0 {
				t.Errorf("the refused call left A written (lock key %d, holders set %d): it wrote before the refusal", a, sa)
			}
			if b != tc.b {
				t.Errorf("the refused call changed B to %q (was %q)", b, tc.b)
			}
			for _, k := range []string{lockA, setA, lockB, setB} {
				_ = src.Do(ctx, "DEL", k).Error()
			}
		})
	}
}

// migratingPair is two keys of different slots on one master (src), and
// another master (dst) to which keyB's slot sB may migrate.
type migratingPair struct {
	src, dst   *redistest.Node
	keyA, keyB string
	sB         string
}

func newMigratingPair(ctx context.Context, t *testing.T, c *redistest.Cluster, names slot.Namer) *migratingPair {
	t.Helper()
	p := &migratingPair{keyA: "a0"}
	sA := slot.KeySlot(names.LockKey(p.keyA))
	var err error
	if p.src, err = c.NodeForSlot(ctx, sA); err != nil {
		t.Fatal(err)
	}
	for i := 0; p.keyB == ""; i++ {
		k := fmt.Sprintf("b%d", i)
		if slot.KeySlot(names.LockKey(k)) == sA {
			continue
		}
		n, err := c.NodeForSlot(ctx, slot.KeySlot(names.LockKey(k)))
		if err != nil {
			t.Fatal(err)
		}
		if n.ID() == p.src.ID() {
			p.keyB = k
		}
	}
	p.sB = fmt.Sprint(slot.KeySlot(names.LockKey(p.keyB)))
	masters, err := c.Masters(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range masters {
		if m.ID() != p.src.ID() {
			p.dst = m
			break
		}
	}
	if p.dst == nil {
		t.Fatal("one master only")
	}
	t.Cleanup(p.stable)
	return p
}

// migrate sets sB MIGRATING on src, IMPORTING on dst; nothing is moved.
func (p *migratingPair) migrate(ctx context.Context, t *testing.T) {
	t.Helper()
	if err := p.dst.Do(ctx, "CLUSTER", "SETSLOT", p.sB, "IMPORTING", p.src.ID()).Error(); err != nil {
		t.Fatal(err)
	}
	if err := p.src.Do(ctx, "CLUSTER", "SETSLOT", p.sB, "MIGRATING", p.dst.ID()).Error(); err != nil {
		t.Fatal(err)
	}
}

// stable calls the migration off: sB stays with src.
func (p *migratingPair) stable() {
	for _, n := range []*redistest.Node{p.dst, p.src} {
		_ = n.Do(context.Background(), "CLUSTER", "SETSLOT", p.sB, "STABLE").Error()
	}
}

// TestReserveMigratingQueueEmptiedByItself runs reserve.lua itself (node
// form, mode 'r') for [A, B] on one master: A free in a stable slot, B
// already the waiter's reservation, marked, in a slot MIGRATING on this
// node, its line holding a dead entry (a waiter whose deadline passed)
// and, in one case, the waiter's own entry. The call's own ZREMs of
// those entries delete the line; a later read of it (older_waits' ZRANGE
// after drop_dead, leave_mine's ZCARD) was refused as a "non local key"
// after A's reservation was written, and the engine reads an error as
// nothing written. The call must succeed (B stays the waiter's) or fail
// having written nothing.
func TestReserveMigratingQueueEmptiedByItself(t *testing.T) {
	c := redistest.StartForTest(t, redistest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	names, err := slot.NewNamer("migres")
	if err != nil {
		t.Fatal(err)
	}
	p := newMigratingPair(ctx, t, c, names)
	lockA, lockB := names.LockKey(p.keyA), names.LockKey(p.keyB)
	q := names.QueueKeyInSlot(p.keyB, slot.KeySlot(p.keyB))
	const waiter, ticket, inbox = "w1", "1000", "inbox1"
	for _, tc := range []struct {
		name string
		own  bool
	}{{"dead-entry", false}, {"dead-entry-and-own", true}} {
		t.Run(tc.name, func(t *testing.T) {
			setup := [][]string{{"DEL", lockA}, {"SET", lockB, "^" + ticket + ":" + waiter + "/4:" + inbox + "!", "PX", "30000"},
				{"ZADD", q, "1", "ghost"}}
			if tc.own {
				setup = append(setup, []string{"ZADD", q, ticket, waiter + "/2 " + inbox})
			}
			for _, cmd := range setup {
				if err := p.src.Do(ctx, cmd...).Error(); err != nil {
					t.Fatal(err)
				}
			}
			p.migrate(ctx, t)
			args := []string{"EVAL", reserveScript.nodeText, "1", lockA,
				waiter, ticket, inbox, "r:5", lockA, lockB}
			res, rerr := p.src.Do(ctx, args...).ToAny()
			p.stable()
			a, aerr := p.src.Do(ctx, "EXISTS", lockA).AsInt64()
			b, _ := p.src.Do(ctx, "GET", lockB).ToString()
			t.Logf("reserve [A, B] with B's slot %s migrating: %v %v; A exists %d (%v); B = %q", p.sB, res, rerr, a, aerr, b)
			if rerr != nil && (aerr != nil || a != 0) {
				t.Errorf("the refused call left A reserved: it wrote before the refusal")
			}
			if rerr == nil && b != "^"+ticket+":"+waiter+"/5:"+inbox {
				t.Errorf("the call succeeded but B = %q, not the waiter's unmarked reservation", b)
			}
			for _, k := range []string{lockA, lockB, q} {
				_ = p.src.Do(ctx, "DEL", k).Error()
			}
		})
	}
}

// TestReserveMigratingHandOffToTheLastEntry runs reserve.lua itself (node
// form, mode 'r') for [A, B] on one master: A free in a stable slot, B
// the caller's reservation, marked, in a slot MIGRATING on this node, its
// line holding one live waiter older than the caller (which joined after
// B was reserved and asked the caller to yield: rule Y). The call hands
// B to that waiter and puts the caller in B's line. Handing B off first
// popped the line's last entry (deleting the line), and the join after
// it read the deleted line: a "non local key" refusal after A's
// reservation and B's hand-off were written, which the engine reads as
// nothing written. The call must succeed: A the caller's, B the older
// waiter's reservation, marked, the caller alone in B's line. (A free B
// cannot show it: its GET is refused first, with nothing written.)
//
// Redis 7.4.1 refuses even the GET of B, an existing key of the migrating
// slot, after the GET of A in a script declaring A ("non local key"; Redis
// 7.0.15 and Valkey 8.0.1 serve it): the call is refused before its first
// write and the hand-off is never reached. A probe script that reads A,
// then B, says which the server does; where it is refused, the call must
// have written nothing and the test is NOT RUN. (Mutation: the probe's
// outcome ignored fails here on Redis 7.4.1.)
func TestReserveMigratingHandOffToTheLastEntry(t *testing.T) {
	c := redistest.StartForTest(t, redistest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	names, err := slot.NewNamer("migho")
	if err != nil {
		t.Fatal(err)
	}
	p := newMigratingPair(ctx, t, c, names)
	lockA, lockB := names.LockKey(p.keyA), names.LockKey(p.keyB)
	q := names.QueueKeyInSlot(p.keyB, slot.KeySlot(p.keyB))
	const waiter, ticket, inbox = "w1", "2000", "inbox1"
	const older = "w0 inbox0" // ticket 1000; an older version's entry (no seq: rule E0)
	for _, cmd := range [][]string{{"DEL", lockA}, {"DEL", q},
		{"SET", lockB, "^" + ticket + ":" + waiter + "/3:" + inbox + "!", "PX", "30000"},
		{"ZADD", q, "1000", older}} {
		if err := p.src.Do(ctx, cmd...).Error(); err != nil {
			t.Fatal(err)
		}
	}
	p.migrate(ctx, t)
	const probe = "#!lua flags=allow-cross-slot-keys\nredis.call('GET', KEYS[1])\nreturn redis.call('GET', ARGV[1])"
	_, perr := p.src.Do(ctx, "EVAL", probe, "1", lockA, lockB).ToAny()
	res, rerr := p.src.Do(ctx, "EVAL", reserveScript.nodeText, "1", lockA,
		waiter, ticket, inbox, "r:4", lockA, lockB).ToAny()
	p.stable()
	a, _ := p.src.Do(ctx, "GET", lockA).ToString()
	b, _ := p.src.Do(ctx, "GET", lockB).ToString()
	line, _ := p.src.Do(ctx, "ZRANGE", q, "0", "-1").AsStrSlice()
	t.Logf("reserve [A, B] with B's slot %s migrating: %v %v; A = %q, B = %q, B's line %q", p.sB, res, rerr, a, b, line)
	for _, k := range []string{lockA, lockB, q} {
		defer func() { _ = p.src.Do(context.Background(), "DEL", k).Error() }()
	}
	if perr != nil {
		if rerr == nil || a != "" || b != "^"+ticket+":"+waiter+"/3:"+inbox+"!" || len(line) != 1 || line[0] != older {
			t.Fatalf("the server refuses a script's read of B (%v), yet the call returned %v, %v and left A = %q, B = %q, B's line %q: it must be refused with nothing written", perr, res, rerr, a, b, line)
		}
		srv, err := c.Server(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Skipf("NOT RUN: %s refuses a script's read of an existing key of a migrating slot (%v); the call was refused before writing anything", srv, perr)
	}
	if rerr != nil {
		t.Fatalf("the call was refused (%v) after writing: A = %q, B = %q", rerr, a, b)
	}
	if a != "^"+ticket+":"+waiter+"/4:"+inbox {
		t.Errorf("A = %q, want the caller's reservation", a)
	}
	if b != "^1000:w0:inbox0!" {
		t.Errorf("B = %q, want the older waiter's reservation, marked (the caller waits)", b)
	}
	if len(line) != 1 || !strings.HasPrefix(line[0], waiter+"/4 "+inbox+" ") {
		t.Errorf("B's line %q, want the caller alone", line)
	}
}

// TestReserveRoundOneMigratingQueueRefused runs reserve.lua itself (node
// form, r:1) for [A, B] on one master: A free in a stable slot, B held by
// another in a slot MIGRATING on this node, B's line not here. Round 1
// reserves A as it reads it (SET NX GET); B's line is then refused as a
// "non local key". The engine reads an error as nothing written, so the
// call must fail with A free again. Mutation checked: B's line read with
// redis.call (the error raised past the undo): A is left reserved.
func TestReserveRoundOneMigratingQueueRefused(t *testing.T) {
	c := redistest.StartForTest(t, redistest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	names, err := slot.NewNamer("mig1")
	if err != nil {
		t.Fatal(err)
	}
	p := newMigratingPair(ctx, t, c, names)
	lockA, lockB := names.LockKey(p.keyA), names.LockKey(p.keyB)
	qB := names.QueueKeyInSlot(p.keyB, slot.KeySlot(p.keyB))
	for _, cmd := range [][]string{{"DEL", lockA}, {"DEL", qB}, {"SET", lockB, "other", "PX", "30000"}} {
		if err := p.src.Do(ctx, cmd...).Error(); err != nil {
			t.Fatal(err)
		}
	}
	p.migrate(ctx, t)
	rerr := p.src.Do(ctx, "EVAL", reserveScript.nodeText, "1", lockA, "w", "1000", inboxIn(lockA, "W"), "r:1", lockA, lockB).Error()
	p.stable()
	a, _ := p.src.Do(ctx, "GET", lockA).ToString()
	b, _ := p.src.Do(ctx, "GET", lockB).ToString()
	t.Logf("r:1 on [A, B] with B's slot %s migrating, B's line elsewhere: %v; A = %q, B = %q", p.sB, rerr, a, b)
	if rerr == nil || !strings.Contains(rerr.Error(), "non local key") {
		t.Fatalf("the call: %v, want a non local key refusal (the case did not arise)", rerr)
	}
	if a != "" {
		t.Errorf("the refused call left A = %q: it wrote before the refusal", a)
	}
	if b != "other" {
		t.Errorf("the refused call changed B to %q", b)
	}
	for _, k := range []string{lockA, lockB, qB} {
		_ = p.src.Do(ctx, "DEL", k).Error()
	}
}
