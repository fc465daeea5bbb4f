package batch

import (
	"context"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/slotlock/slotlock/internal/lockval"
	"github.com/slotlock/slotlock/internal/protocol"
	"github.com/slotlock/slotlock/internal/redistest"
	"github.com/slotlock/slotlock/slot"
)

// The seq of a waiter by reservation's calls (docs/proposals/direct-grant.md,
// section 1) in the scripts' and the inbox's parsers.

// seqNode is one master and a lock key of a slot it owns, with the key's
// queue keys, for script-level tests.
type seqNode struct {
	n           *redistest.Node
	lock, q, qd string
}

func newSeqNode(ctx context.Context, t *testing.T, prefix, key string) seqNode {
	t.Helper()
	c := redistest.StartForTest(t, redistest.Options{})
	names, err := slot.NewNamer(prefix)
	if err != nil {
		t.Fatal(err)
	}
	q, qd := names.QueueKeysInSlot(key, slot.KeySlot(key))
	n, err := c.NodeForSlot(ctx, slot.KeySlot(key))
	if err != nil {
		t.Fatal(err)
	}
	return seqNode{n: n, lock: names.LockKey(key), q: q, qd: qd}
}

func (s seqNode) do(ctx context.Context, t *testing.T, cmds ...[]string) {
	t.Helper()
	for _, cmd := range cmds {
		if err := s.n.Do(ctx, cmd...).Error(); err != nil && !rueidis.IsRedisNil(err) {
			t.Fatalf("%v: %v", cmd, err)
		}
	}
}

func (s seqNode) get(ctx context.Context) string {
	v, _ := s.n.Do(ctx, "GET", s.lock).ToString()
	return v
}

func (s seqNode) line(ctx context.Context) []string {
	l, _ := s.n.Do(ctx, "ZRANGE", s.q, "0", "-1").AsStrSlice()
	return l
}

// TestConfirmTakesItsSeqReservations runs acquire.lua mode 'c' (node form)
// on a key reserved for the waiter with a seq, marked, and on one in the
// form of an older version (no seq): both are the waiter's and are
// granted, the mark kept. Mutation checked: reserved_for in common.lua
// returning the waiter with its seq ('w/9'): the seq reservation reads as
// another's and the confirm reports a conflict.
func TestConfirmTakesItsSeqReservations(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s := newSeqNode(ctx, t, "cfs", "k")
	const waiter, ticket = "w", "1000"
	for _, tc := range []struct{ value, want string }{
		{"^" + ticket + ":" + waiter + "/9:inbox!", waiter + "!"},
		{"^" + ticket + ":" + waiter + ":inbox", waiter}, // rule E0's form: still the waiter's
	} {
		s.do(ctx, t, []string{"DEL", s.lock, s.q, s.qd}, []string{"SET", s.lock, tc.value, "PX", "500"})
		res, err := s.n.Do(ctx, "EVAL", acquireScript.nodeText, "1", s.lock,
			waiter, "", "30000", "c:"+ticket, s.lock).AsIntSlice()
		if err != nil {
			t.Fatal(err)
		}
		v := s.get(ctx)
		pttl, _ := s.n.Do(ctx, "PTTL", s.lock).AsInt64()
		t.Logf("confirm on %q: %v; value %q, PTTL %d", tc.value, res, v, pttl)
		if len(res) < 2 || res[0] != 1 || res[1] != 0 {
			t.Errorf("confirm on %q answered %v, want granted (1, no conflict)", tc.value, res)
		}
		if v != tc.want || pttl < 29000 {
			t.Errorf("value %q PTTL %d, want %q with the TTL", v, pttl, tc.want)
		}
	}
	s.do(ctx, t, []string{"DEL", s.lock, s.q, s.qd})
}

// TestReserveFindsItsSeqEntries runs reserve.lua (node form) where the
// waiter's own entry in a key's queue has a seq ('w/3 inbox0', written
// under an inbox of before a reshard): mode 'r' on the free key reserves
// it unmarked and takes the entry out (were it left, the key would be
// marked, and its release would hand it to an entry of an acquisition
// that holds it); mode 'l' on a key held by another leaves the entry.
// Mutation checked: entry_of in common.lua accepting only 'token ' (the
// form without seq): the entry stays and the reservation is marked.
func TestReserveFindsItsSeqEntries(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s := newSeqNode(ctx, t, "rfs", "k")
	const waiter, ticket, inbox, own = "w", "1000", "inbox1", "w/3 inbox0"
	setup := func(value string) {
		s.do(ctx, t, []string{"DEL", s.lock, s.q, s.qd},
			[]string{"ZADD", s.q, ticket, own}, []string{"ZADD", s.qd, "99999999999999", own})
		if value != "" {
			s.do(ctx, t, []string{"SET", s.lock, value, "PX", "30000"})
		}
	}
	reserve := func(mode string) []int64 {
		res, err := s.n.Do(ctx, "EVAL", reserveScript.nodeText, "1", s.lock,
			waiter, ticket, inbox, mode, s.lock).AsIntSlice()
		if err != nil {
			t.Fatal(err)
		}
		return res
	}

	setup("")
	res := reserve("r")
	v, line := s.get(ctx), s.line(ctx)
	t.Logf("r on a free key with its own entry %q: %v; value %q, line %q", own, res, v, line)
	if r, ok := lockval.ParseReserved(v); !ok || r.Waiter != waiter || r.Marked || len(line) != 0 {
		t.Errorf("value %q, line %q: want the waiter's unmarked reservation and no line", v, line)
	}

	setup("other")
	res = reserve("l")
	v, line = s.get(ctx), s.line(ctx)
	t.Logf("l on a key held by another with its own entry %q: %v; value %q, line %q", own, res, v, line)
	if v != "other" || len(line) != 0 {
		t.Errorf("value %q, line %q: want 'other' untouched and the entry gone", v, line)
	}
	s.do(ctx, t, []string{"DEL", s.lock, s.q, s.qd})
}

// TestDeliverReadsTheSeq: a hand-off on an inbox reaches the listener of
// its token with the seq of the popped entry; one without a seq (an older
// version) with seq 0; a yield names the bare token. Mutation checked:
// deliver looking the listener up by the whole last field ('w/7'): the
// hand-off with a seq is dropped.
func TestDeliverReadsTheSeq(t *testing.T) {
	b := newInbox()
	defer b.cancel()
	ch := make(chan protocol.Msg, 4)
	b.listeners["w"] = ch
	for _, m := range []string{"h P{a}:k w/7", "h P{a}:k w", "y P{a}:k w", "h P{a}:k other/7"} {
		b.deliver(rueidis.PubSubMessage{Channel: "inbox", Message: m})
	}
	want := []protocol.Msg{{Key: "P{a}:k", Seq: 7}, {Key: "P{a}:k"}, {Key: "P{a}:k", Yield: true}}
	for _, w := range want {
		select {
		case got := <-ch:
			if got != w {
				t.Errorf("got %+v, want %+v", got, w)
			}
		default:
			t.Fatalf("no message, want %+v", w)
		}
	}
	select {
	case got := <-ch:
		t.Errorf("a message for another token was delivered: %+v", got)
	default:
	}
}
