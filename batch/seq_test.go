package batch

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/slotlock/slotlock/internal/lockval"
	"github.com/slotlock/slotlock/internal/protocol"
	"github.com/slotlock/slotlock/internal/redistest"
	"github.com/slotlock/slotlock/slot"
)

// The seq of a waiter by reservation's calls (docs/design.md, "Waiting by
// reservation across processes") in the scripts' and the inbox's parsers.

// seqNode is one master and a lock key of a slot it owns, with the key's
// queue keys, for script-level tests.
type seqNode struct {
	n       *redistest.Node
	lock, q string
}

func newSeqNode(ctx context.Context, t *testing.T, prefix, key string) seqNode {
	t.Helper()
	c := redistest.Require(t, cluster)
	names, err := slot.NewNamer(prefix)
	if err != nil {
		t.Fatal(err)
	}
	q := names.QueueKeyInSlot(key, slot.KeySlot(key))
	n, err := c.NodeForSlot(ctx, slot.KeySlot(key))
	if err != nil {
		t.Fatal(err)
	}
	return seqNode{n: n, lock: names.LockKey(key), q: q}
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

// line returns the members of the key's queue without their deadlines
// (which s.deadline reads).
func (s seqNode) line(ctx context.Context) []string {
	l, _ := s.n.Do(ctx, "ZRANGE", s.q, "0", "-1").AsStrSlice()
	for i, m := range l {
		if e := lockval.QueueEntry(m); !e.Deadline.IsZero() {
			l[i] = m[:strings.LastIndexByte(m, ' ')]
		}
	}
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
		s.do(ctx, t, []string{"DEL", s.lock, s.q}, []string{"SET", s.lock, tc.value, "PX", "500"})
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
	s.do(ctx, t, []string{"DEL", s.lock, s.q})
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
		s.do(ctx, t, []string{"DEL", s.lock, s.q},
			[]string{"ZADD", s.q, ticket, own})
		if value != "" {
			s.do(ctx, t, []string{"SET", s.lock, value, "PX", "30000"})
		}
	}
	reserve := func(mode string) []int64 {
		res, err := s.n.Do(ctx, "EVAL", reserveScript.nodeText, "1", s.lock,
			waiter, ticket, inbox, mode+":4", s.lock).AsIntSlice()
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
	s.do(ctx, t, []string{"DEL", s.lock, s.q})
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

// TestListenKeepsABurstOfHandOffs: a release hands on all its keys at
// once, so a waiter of n keys may get n hand-offs (and as many yields)
// while it is in a round; Listen keeps them all. Mutation checked: a
// buffer of 16 (messages past the 16th dropped, each costing its waiter
// a wait for its refresh).
func TestListenKeepsABurstOfHandOffs(t *testing.T) {
	e := &Engine{inbox: newInbox()}
	defer e.inbox.cancel()
	const n = 100
	r := &protocol.Request{Who: protocol.Who{Holder: "w"}}
	msgs, stop := e.Listen(r, n)
	defer stop()
	for i := range n {
		e.inbox.deliver(rueidis.PubSubMessage{Message: fmt.Sprintf("h P{a}:k%d w/1", i)})
		e.inbox.deliver(rueidis.PubSubMessage{Message: fmt.Sprintf("y P{a}:k%d w", i)})
	}
	if got := len(msgs); got != 2*n {
		t.Errorf("%d of %d messages kept", got, 2*n)
	}
}

// reserveAt runs reserve.lua (node form) on s's key with mode and seq
// (e.g. "r:7") and returns the codes after the server's time.
func (s seqNode) reserveAt(ctx context.Context, t *testing.T, waiter, ticket, inbox, mode string) []int64 {
	t.Helper()
	res, err := s.n.Do(ctx, "EVAL", reserveScript.nodeText, "1", s.lock,
		waiter, ticket, inbox, mode, s.lock).AsIntSlice()
	if err != nil || len(res) != 3 {
		t.Fatalf("reserve %s: %v %v", mode, res, err)
	}
	return res[2:]
}

func (s seqNode) pttl(ctx context.Context) int64 {
	p, _ := s.n.Do(ctx, "PTTL", s.lock).AsInt64()
	return p
}

// deadline returns the deadline (server ms) of the queue entry whose
// member starts with entry, 0 when there is none.
func (s seqNode) deadline(ctx context.Context, entry string) int64 {
	l, _ := s.n.Do(ctx, "ZRANGE", s.q, "0", "-1").AsStrSlice()
	for _, m := range l {
		if strings.HasPrefix(m, entry+" ") {
			return lockval.QueueEntry(m).Deadline.UnixMilli()
		}
	}
	return 0
}

// inboxIn returns a channel name in the slot of lock key k (P{T}:K): an
// inbox the node's scripts may publish to.
func inboxIn(k, id string) string { return k[:strings.IndexByte(k, '}')+1] + "#in:" + id }

// TestReserveNamesItsCalls: reserve.lua names the call that wrote a
// reservation or created a queue entry (docs/design.md, "What slotlock
// keeps in Redis"). A free key, r:7: the reservation names call 7, code 0.
// A key held by another, r:7: entry 'w/7 inbox', code 7; r:9 on it: the
// same entry (member and score), code 7, its deadline pushed on. An entry
// of its own under another inbox, 'w/3 inbox0', is replaced by 'w/9
// inbox', code 9. Round 1 (which skips the search for its own entries)
// sent twice leaves one entry, 'w/1 inbox'; r:2 under another inbox
// replaces it. Mutations checked: join creating a new member per call
// (the second call answers 9 and leaves two entries); the search skipped
// in round 2 too (r:2 leaves two entries).
func TestReserveNamesItsCalls(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s := newSeqNode(ctx, t, "rnc", "k")
	const waiter, ticket = "w", "1000"
	inbox := inboxIn(s.lock, "A")
	clean := []string{"DEL", s.lock, s.q}

	s.do(ctx, t, clean)
	if c := s.reserveAt(ctx, t, waiter, ticket, inbox, "r:7"); c[0] != 0 {
		t.Errorf("free key, r:7: code %d, want 0", c[0])
	}
	if v, want := s.get(ctx), "^"+ticket+":"+waiter+"/7:"+inbox; v != want {
		t.Errorf("free key, r:7: value %q, want %q", v, want)
	}

	s.do(ctx, t, clean, []string{"SET", s.lock, "other", "PX", "30000"})
	if c := s.reserveAt(ctx, t, waiter, ticket, inbox, "r:7"); c[0] != 7 {
		t.Errorf("held key, r:7: code %d, want 7", c[0])
	}
	entry := waiter + "/7 " + inbox
	if l := s.line(ctx); !equalStrings(l, []string{entry}) {
		t.Fatalf("held key, r:7: line %q, want [%q]", l, entry)
	}
	// Pull the deadline in, so that the push is seen without waiting.
	now, err := s.n.Do(ctx, "TIME").AsIntSlice()
	if err != nil {
		t.Fatal(err)
	}
	// r:8 keeps the entry and writes nothing while more than half of
	// ENTRY_MS is left (a deadline a minute away); r:9, with one second
	// left, writes it again with the deadline pushed on. Mutation checked:
	// join writing the entry on every call.
	far := now[0]*1000 + now[1]/1000 + 60_000
	s.do(ctx, t, []string{"DEL", s.q}, []string{"ZADD", s.q, ticket, fmt.Sprintf("%s %d", entry, far)})
	if c := s.reserveAt(ctx, t, waiter, ticket, inbox, "r:8"); c[0] != 7 {
		t.Errorf("held key, r:8 after r:7: code %d, want 7 (the entry kept)", c[0])
	}
	if d := s.deadline(ctx, entry); d != far {
		t.Errorf("r:8 moved the entry's deadline from %d to %d", far, d)
	}
	early := now[0]*1000 + now[1]/1000 + 1000
	s.do(ctx, t, []string{"DEL", s.q}, []string{"ZADD", s.q, ticket, fmt.Sprintf("%s %d", entry, early)})
	if c := s.reserveAt(ctx, t, waiter, ticket, inbox, "r:9"); c[0] != 7 {
		t.Errorf("held key, r:9 after r:7: code %d, want 7 (the entry kept)", c[0])
	}
	if l := s.line(ctx); !equalStrings(l, []string{entry}) {
		t.Errorf("held key, r:9: line %q, want [%q]", l, entry)
	}
	if d := s.deadline(ctx, entry); d < early+1500 {
		t.Errorf("r:9 left the entry's deadline at %d (was %d): not pushed on", d, early)
	}
	if v := s.get(ctx); v != "other!" {
		t.Errorf("value %q, want 'other!' (marked)", v)
	}

	old := waiter + "/3 " + inboxIn(s.lock, "B")
	s.do(ctx, t, clean, []string{"SET", s.lock, "other", "PX", "30000"},
		[]string{"ZADD", s.q, ticket, old})
	if c := s.reserveAt(ctx, t, waiter, ticket, inbox, "r:9"); c[0] != 9 {
		t.Errorf("entry under another inbox, r:9: code %d, want 9", c[0])
	}
	if l, want := s.line(ctx), waiter+"/9 "+inbox; !equalStrings(l, []string{want}) {
		t.Errorf("line %q, want [%q]", l, want)
	}

	// Round 1 looks for no entry of its own (it can have none but its
	// own, were the call run twice): the call run twice leaves two
	// entries of call 1; round 2 under another inbox replaces both.
	s.do(ctx, t, clean, []string{"SET", s.lock, "other", "PX", "30000"})
	for range 2 {
		if c := s.reserveAt(ctx, t, waiter, ticket, inbox, "r:1"); c[0] != 1 {
			t.Errorf("held key, r:1: code %d, want 1", c[0])
		}
	}
	if l, want := s.line(ctx), waiter+"/1 "+inbox; len(l) == 0 || slices.ContainsFunc(l, func(m string) bool { return m != want }) {
		t.Errorf("r:1 sent twice: line %q, want only %q", l, want)
	}
	other := inboxIn(s.lock, "B")
	if c := s.reserveAt(ctx, t, waiter, ticket, other, "r:2"); c[0] != 2 {
		t.Errorf("r:2 under another inbox: code %d, want 2", c[0])
	}
	if l, want := s.line(ctx), waiter+"/2 "+other; !equalStrings(l, []string{want}) {
		t.Errorf("r:2 under another inbox: line %q, want [%q]", l, want)
	}
	s.do(ctx, t, clean)
}

// subscribe listens on channel ch of node n and returns the messages.
func subscribe(ctx context.Context, t *testing.T, n *redistest.Node, ch string) <-chan string {
	t.Helper()
	cl, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{n.Addr()}, ForceSingleClient: true, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	out, ready := make(chan string, 16), make(chan struct{})
	sctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		var once sync.Once
		hooked := rueidis.WithOnSubscriptionHook(sctx, func(rueidis.PubSubSubscription) { once.Do(func() { close(ready) }) })
		_ = cl.Receive(hooked, cl.B().Ssubscribe().Channel(ch).Build(), func(m rueidis.PubSubMessage) {
			select {
			case out <- m.Message:
			default: // a test that only listens (hand_off asks whether anyone does) reads none
			}
		})
	}()
	t.Cleanup(func() { stop(); <-done; cl.Close() })
	select {
	case <-ready:
	case <-ctx.Done():
		t.Fatal("no subscription")
	}
	return out
}

// TestHandOffCarriesTheEntrySeq: a release of a marked key (release.lua,
// and release1.lua, the one-key form) hands it to the entry 'w/7 inbox'
// at the head of its queue: the reservation names w/7 and the message on
// the inbox says 'h <key> w/7', the call that created the entry, which is
// what lets the waiter tell this hand-off from one of an older entry.
// Mutation checked: hand_off rebuilding the waiter from the token alone
// (entry_waiter(head)): value '^T:w:inbox', message 'h <key> w'.
func TestHandOffCarriesTheEntrySeq(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s := newSeqNode(ctx, t, "hoc", "k")
	const waiter, ticket = "w", "1000"
	inbox := inboxIn(s.lock, "A")
	msgs := subscribe(ctx, t, s.n, inbox)
	entry := waiter + "/7 " + inbox
	for _, release := range []struct {
		name string
		args []string
	}{
		{"release", []string{"EVAL", releaseScript.nodeText, "1", s.lock, "holder", "", s.lock}},
		{"release1", []string{"EVAL", shebangNodeOOM + commonLua + release1Body, "2", s.lock, s.q, "holder"}},
	} {
		s.do(ctx, t, []string{"DEL", s.lock, s.q}, []string{"SET", s.lock, "holder!", "PX", "30000"},
			[]string{"ZADD", s.q, ticket, entry})
		if err := s.n.Do(ctx, release.args...).Error(); err != nil {
			t.Fatalf("%s: %v", release.name, err)
		}
		if v, want := s.get(ctx), "^"+ticket+":"+waiter+"/7:"+inbox; v != want {
			t.Errorf("%s: value %q, want %q", release.name, v, want)
		}
		select {
		case m := <-msgs:
			if want := "h " + s.lock + " " + waiter + "/7"; m != want {
				t.Errorf("%s: message %q, want %q", release.name, m, want)
			}
		case <-time.After(5 * time.Second):
			t.Errorf("%s: no message on the inbox", release.name)
		}
	}
	s.do(ctx, t, []string{"DEL", s.lock, s.q})
}

// TestHandOffPassesOverAWaiterNobodyHears: a release of a marked key
// hands it to the waiter by reservation at the head of its line and tells
// it, and passes it over when nobody listens on its inbox (its Locker is
// gone): the same call rewrites the key for the next one, until one is
// heard, and the passed-over entries leave the line. With nobody heard the key is deleted and the
// line emptied. At most DEAF_SCAN (4) are passed over in one call: the
// fifth unheard one is handed the key unasked, as before. An entry
// without an inbox (an older version's waiter in line) is passed over,
// and an entry past its deadline dropped, heard or not. Mutations
// checked: hand_off ignoring SPUBLISH's answer (the first case reserves
// the key for g1); drop_dead taking every entry as live.
func TestHandOffPassesOverAWaiterNobodyHears(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s := newSeqNode(ctx, t, "hpo", "k")
	heard := inboxIn(s.lock, "H")
	msgs := subscribe(ctx, t, s.n, heard)
	deaf := func(i int) string { return fmt.Sprintf("g%d/1 %s", i, inboxIn(s.lock, fmt.Sprintf("G%d", i))) }
	live := "w/3 " + heard
	for _, tc := range []struct {
		name  string
		line  []string // in order (tickets 100, 200, ...)
		value string   // the key's value after the release
		left  []string // the line after it
		msg   bool     // a message on the heard inbox
	}{
		{"deaf-then-heard", []string{deaf(1), deaf(2), live, "x/1 " + heard}, "^300:w/3:" + heard + "!", []string{"x/1 " + heard}, true},
		{"nobody-heard", []string{deaf(1), deaf(2)}, "", nil, false},
		{"older-version-entry-passed-over", []string{"t1", live}, "^200:w/3:" + heard, nil, true},
		{"past-its-deadline-dropped", []string{"x/1 " + heard + " 1", live}, "^200:w/3:" + heard, nil, true},
		{"scan-bound", []string{deaf(1), deaf(2), deaf(3), deaf(4), deaf(5), live}, "^500:g5/1:" + inboxIn(s.lock, "G5") + "!", []string{live}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s.do(ctx, t, []string{"DEL", s.lock, s.q}, []string{"SET", s.lock, "holder!", "PX", "30000"})
			for i, m := range tc.line {
				s.do(ctx, t, []string{"ZADD", s.q, fmt.Sprint(100 * (i + 1)), m})
			}
			if err := s.n.Do(ctx, "EVAL", releaseScript.nodeText, "1", s.lock, "holder", "", s.lock).Error(); err != nil {
				t.Fatal(err)
			}
			if v := s.get(ctx); v != tc.value {
				t.Errorf("value %q, want %q", v, tc.value)
			}
			if l := s.line(ctx); !equalStrings(l, tc.left) {
				t.Errorf("line %q, want %q", l, tc.left)
			}
			// A message published in the script is delivered with its
			// reply: 200 ms to see that none comes, and 5 s for one that
			// must (its delivery to this goroutine is the machine's load).
			wait := 200 * time.Millisecond
			if tc.msg {
				wait = 5 * time.Second
			}
			select {
			case m := <-msgs:
				if !tc.msg {
					t.Errorf("message %q on the heard inbox, want none", m)
				} else if want := "h " + s.lock + " w/3"; m != want {
					t.Errorf("message %q, want %q", m, want)
				}
			case <-time.After(wait):
				if tc.msg {
					t.Error("no message on the heard inbox")
				}
			}
		})
	}
	s.do(ctx, t, []string{"DEL", s.lock, s.q})
}

// twoWaiters gives waiters w and o inboxes on s's node: yields receives
// w's messages, and o listens (a hand-off passes over a waiter nobody
// hears).
func (s seqNode) twoWaiters(ctx context.Context, t *testing.T) (inbox, oinbox string, yields <-chan string) {
	inbox, oinbox = inboxIn(s.lock, "W"), inboxIn(s.lock, "O")
	yields = subscribe(ctx, t, s.n, inbox)
	subscribe(ctx, t, s.n, oinbox)
	return inbox, oinbox, yields
}

// expectYield waits for the request to yield lock key k of waiter on
// yields ('y <key> <waiter>').
func expectYield(t *testing.T, yields <-chan string, k, waiter string) {
	t.Helper()
	select {
	case m := <-yields:
		if want := "y " + k + " " + waiter; m != want {
			t.Errorf("yield request %q, want %q", m, want)
		}
	case <-time.After(5 * time.Second):
		t.Errorf("no yield request on w's inbox")
	}
}

// TestReserveGiveAwayReportsTheNewEntry (case (a) of direct-grant.md 2.4,
// at script level): key k is w's reservation of call 5, an older waiter
// o stands in its line; w's r:6 hands k to o and answers code 6, w in
// line under 'w/6 inbox': a code above the seq its evidence names, so
// that rule F drops the evidence. Three ways: o's entry put in by hand; o's
// own reserve call (which asks w to yield: 'y <key> w' on w's inbox); and
// a leftover entry of w's own, 'w/2 inbox', beside the reservation, which
// must go (code 6, not 2). Mutations checked: reserve.lua answering 0 for
// a key it gave away (as the code before the seq did); join keeping the
// leftover entry when it gives the key away (code 2).
func TestReserveGiveAwayReportsTheNewEntry(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s := newSeqNode(ctx, t, "rga", "k")
	const waiter, ticket, older, oticket = "w", "1000", "o", "500"
	inbox, oinbox, yields := s.twoWaiters(ctx, t)
	oentry := older + "/1 " + oinbox
	for _, tc := range []struct {
		name     string
		leftover bool
		byCall   bool
	}{{"by-hand", false, false}, {"by-the-older-waiters-call", false, true}, {"leftover-own-entry", true, false}} {
		t.Run(tc.name, func(t *testing.T) {
			s.do(ctx, t, []string{"DEL", s.lock, s.q},
				[]string{"SET", s.lock, "^" + ticket + ":" + waiter + "/5:" + inbox, "PX", "500"})
			if tc.byCall {
				if c := s.reserveAt(ctx, t, older, oticket, oinbox, "r:1"); c[0] != 1 {
					t.Fatalf("o's r:1 on w's reservation: code %d, want 1", c[0])
				}
				expectYield(t, yields, s.lock, waiter)
			} else {
				s.do(ctx, t, []string{"SET", s.lock, "^" + ticket + ":" + waiter + "/5:" + inbox + "!", "PX", "500"},
					[]string{"ZADD", s.q, oticket, oentry})
			}
			if tc.leftover {
				left := waiter + "/2 " + inbox
				s.do(ctx, t, []string{"ZADD", s.q, ticket, left})
			}
			c := s.reserveAt(ctx, t, waiter, ticket, inbox, "r:6")
			v, line := s.get(ctx), s.line(ctx)
			t.Logf("w's r:6: code %d; value %q, line %q", c[0], v, line)
			if c[0] != 6 {
				t.Errorf("code %d, want 6 (w stands under the entry of call 6)", c[0])
			}
			if want := "^" + oticket + ":" + older + "/1:" + oinbox + "!"; v != want {
				t.Errorf("value %q, want %q (o's, marked: w waits)", v, want)
			}
			if want := waiter + "/6 " + inbox; !equalStrings(line, []string{want}) {
				t.Errorf("line %q, want [%q]", line, want)
			}
		})
	}
	s.do(ctx, t, []string{"DEL", s.lock, s.q})
}

// TestRoundOneReadsNoLineOfAFreeKey: key k is free, an older waiter o in
// its line (its reservation lapsed). w's round 1 reads no line of a free
// key: k becomes w's reservation (code 0), the line untouched. o's next
// round finds k reserved for a younger waiter and asks it to yield ('y'
// on w's inbox, k marked), and w's round 2 gives k to o and stands in
// line under call 2 (rule Y). A later round of w on a free key reads the
// line and hands k to o at once. Mutations checked: round 1 reading the
// line (code 1, k handed to o); round 2 not reading it (code 0).
func TestRoundOneReadsNoLineOfAFreeKey(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s := newSeqNode(ctx, t, "r1f", "k")
	const waiter, ticket, older, oticket = "w", "1000", "o", "500"
	inbox, oinbox, yields := s.twoWaiters(ctx, t)
	oentry := older + "/1 " + oinbox + " 99999999999999" // a deadline far away
	s.do(ctx, t, []string{"DEL", s.lock, s.q}, []string{"ZADD", s.q, oticket, oentry})
	if c := s.reserveAt(ctx, t, waiter, ticket, inbox, "r:1"); c[0] != 0 {
		t.Fatalf("w's r:1 on a free key: code %d, want 0", c[0])
	}
	if v, want := s.get(ctx), "^"+ticket+":"+waiter+"/1:"+inbox; v != want {
		t.Errorf("after w's r:1: value %q, want %q", v, want)
	}
	if c := s.reserveAt(ctx, t, older, oticket, oinbox, "r:2"); c[0] != 1 {
		t.Errorf("o's r:2: code %d, want 1 (its entry of call 1 kept)", c[0])
	}
	expectYield(t, yields, s.lock, waiter)
	if c := s.reserveAt(ctx, t, waiter, ticket, inbox, "r:2"); c[0] != 2 {
		t.Errorf("w's r:2: code %d, want 2 (k given to o)", c[0])
	}
	if v, want := s.get(ctx), "^"+oticket+":"+older+"/1:"+oinbox+"!"; v != want {
		t.Errorf("after w's r:2: value %q, want %q", v, want)
	}
	s.do(ctx, t, []string{"DEL", s.lock, s.q}, []string{"ZADD", s.q, oticket, oentry})
	if c := s.reserveAt(ctx, t, waiter, ticket, inbox, "r:3"); c[0] != 3 {
		t.Errorf("w's r:3 on a free key with o in line: code %d, want 3", c[0])
	}
	if v, want := s.get(ctx), "^"+oticket+":"+older+"/1:"+oinbox+"!"; v != want {
		t.Errorf("after w's r:3: value %q, want %q (o's)", v, want)
	}
	s.do(ctx, t, []string{"DEL", s.lock, s.q})
}

// TestReserveGuardLeavesANewerReservation (case (c) of direct-grant.md
// 2.4): key k is w's reservation of call 9, marked, an older waiter in
// its line. A call 8 of w run late, r:8 or l:8, answers -1 and leaves the
// value, its expiry and the line as they were: without the guard it would
// give away a reservation that w's later calls may have reported as its
// own (r:8 hands it to the older waiter, l:8 too). Mutation
// checked: no guard (ours ignoring the seq): r:8 hands the key on.
func TestReserveGuardLeavesANewerReservation(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s := newSeqNode(ctx, t, "rgn", "k")
	const waiter, ticket = "w", "1000"
	inbox := inboxIn(s.lock, "W")
	oentry := "o/1 " + inboxIn(s.lock, "O")
	value := "^" + ticket + ":" + waiter + "/9:" + inbox + "!"
	for _, mode := range []string{"r:8", "l:8"} {
		s.do(ctx, t, []string{"DEL", s.lock, s.q}, []string{"SET", s.lock, value, "PX", "400"},
			[]string{"ZADD", s.q, "500", oentry})
		c := s.reserveAt(ctx, t, waiter, ticket, inbox, mode)
		v, p, line := s.get(ctx), s.pttl(ctx), s.line(ctx)
		t.Logf("%s on w's reservation of call 9: code %d; value %q PTTL %d, line %q", mode, c[0], v, p, line)
		if c[0] != -1 {
			t.Errorf("%s: code %d, want -1", mode, c[0])
		}
		if v != value || p > 400 || p <= 0 || !equalStrings(line, []string{oentry}) {
			t.Errorf("%s: value %q PTTL %d line %q, want %q (PTTL <= 400) and [%q]: untouched", mode, v, p, line, value, oentry)
		}
	}
	s.do(ctx, t, []string{"DEL", s.lock, s.q})
}

// TestLeaveWakesTheReadersBehind: a writer that leaves the line of a key
// held shared (its Lock cancelled) wakes the reader behind it, which may
// join the holders now: 'h <key> r/1' on the reader's inbox. Mutation
// checked: mode 'l' not calling wake_readers (no message; the reader
// would wait for its refresh).
func TestLeaveWakesTheReadersBehind(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s := newSeqNode(ctx, t, "lwr", "k")
	win, rin := inboxIn(s.lock, "W"), inboxIn(s.lock, "R")
	subscribe(ctx, t, s.n, win)
	msgs := subscribe(ctx, t, s.n, rin)
	s.do(ctx, t, []string{"DEL", s.lock, s.q}, []string{"SET", s.lock, "~r0!", "PX", "30000"},
		[]string{"ZADD", s.q, "50", "x/1 " + win + "~", "200", "r/1 " + rin + "~"})
	// A reader that leaves wakes nobody: its leave changes nothing for
	// the readers behind it. (A message would come with the reply: 200 ms
	// to see that none does.) Mutation checked: waking on any leave.
	if c := s.reserveAt(ctx, t, "x", "50", win, "l:2"); c[0] != 0 {
		t.Fatalf("reader's leave: code %d", c[0])
	}
	select {
	case m := <-msgs:
		t.Errorf("message %q after a reader's leave", m)
	case <-time.After(200 * time.Millisecond):
	}
	s.do(ctx, t, []string{"ZADD", s.q, "100", "w/1 " + win})
	if c := s.reserveAt(ctx, t, "w", "100", win, "l:2"); c[0] != 0 {
		t.Fatalf("leave: code %d", c[0])
	}
	select {
	case m := <-msgs:
		if want := "h " + s.lock + " r/1"; m != want {
			t.Errorf("message %q, want %q", m, want)
		}
	case <-time.After(5 * time.Second):
		t.Error("the reader behind the leaving writer was not woken")
	}
	if l := s.line(ctx); !equalStrings(l, []string{"r/1 " + rin + "~"}) {
		t.Errorf("line %q", l)
	}
	s.do(ctx, t, []string{"DEL", s.lock, s.q})
}

// TestRoundOneUndoesItsReservationsOnAnError: round 1 reserves free keys
// as it reads them (SET NX GET). A node call whose second key is of a slot
// another node serves fails there; the first key, free before the call,
// is free after it: an error reply means nothing was written. Mutation
// checked: without the undo the first key stays reserved for the waiter.
func TestRoundOneUndoesItsReservationsOnAnError(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s := newSeqNode(ctx, t, "r1u", "k")
	c := redistest.Require(t, cluster)
	names, err := slot.NewNamer("r1u")
	if err != nil {
		t.Fatal(err)
	}
	var elsewhere string
	for i := 0; elsewhere == ""; i++ {
		key := fmt.Sprintf("x%d", i)
		n, err := c.NodeForSlot(ctx, slot.KeySlot(key))
		if err != nil {
			t.Fatal(err)
		}
		if n.Addr() != s.n.Addr() {
			elsewhere = names.LockKey(key)
		}
	}
	s.do(ctx, t, []string{"DEL", s.lock, s.q})
	inbox := inboxIn(s.lock, "W")
	err = s.n.Do(ctx, "EVAL", reserveScript.nodeText, "1", s.lock,
		"w", "1000", inbox, "r:1", s.lock, elsewhere).Error()
	t.Logf("r:1 on %s and %s: %v", s.lock, elsewhere, err)
	if err == nil {
		t.Fatal("r:1 with a key of another node's slot: no error")
	}
	if v := s.get(ctx); v != "" {
		t.Errorf("after the failed call: %s is %q, want free", s.lock, v)
	}
	s.do(ctx, t, []string{"DEL", s.lock, s.q})
}

// TestAJoiningReaderWakesOneReader: a reader woken in a shared key's line
// (not handed the key) that joins the holders wakes only the reader its
// leaving brings into the span a wake reaches (the WAKE_MAX-th entry): the
// readers before it were woken with it. Line: l, then 64 readers r1..r64;
// l's confirm leaves r1..r64, and only r64 hears 'h <key> r64/1'.
// Mutations checked: every joining reader waking the whole span (r1 is
// woken first); a joining reader waking nobody (no message: r64 would
// wait for its refresh).
func TestAJoiningReaderWakesOneReader(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s := newSeqNode(ctx, t, "wjr", "k")
	lin, rin := inboxIn(s.lock, "L"), inboxIn(s.lock, "R")
	msgs := subscribe(ctx, t, s.n, rin)
	line := []string{"ZADD", s.q, "100", "l/1 " + lin + "~"}
	for i := 1; i <= 64; i++ {
		line = append(line, fmt.Sprint(100+i), fmt.Sprintf("r%d/1 %s~", i, rin))
	}
	s.do(ctx, t, []string{"DEL", s.lock, s.q}, []string{"SET", s.lock, "~r0!", "PX", "30000"}, line)
	res, err := s.n.Do(ctx, "EVAL", sharedAcquireScript.nodeText, "1", s.lock,
		"l", "", "10000", "c:100", "s", s.lock).AsIntSlice()
	if err != nil || len(res) < 1 || res[0] != 1 {
		t.Fatalf("l's confirm: %v %v, want the key granted", res, err)
	}
	select {
	case m := <-msgs:
		if want := "h " + s.lock + " r64/1"; m != want {
			t.Errorf("message %q, want %q", m, want)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no reader woken")
	}
	// Any other message would have come with the first (one script
	// call): 200 ms to see that none does.
	select {
	case m := <-msgs:
		t.Errorf("a second message %q", m)
	case <-time.After(200 * time.Millisecond):
	}
	if l := s.line(ctx); len(l) != 64 || l[0] != "r1/1 "+rin+"~" {
		t.Errorf("line after l's confirm: %d entries, first %q", len(l), l[0])
	}
	names, err := slot.NewNamer("wjr")
	if err != nil {
		t.Fatal(err)
	}
	s.do(ctx, t, []string{"DEL", s.lock, s.q, names.SharedKeyInSlot("k", slot.KeySlot("k"))})
}

// TestAJoinGivesTheLineTimeOnlyWhenShort: a line outlives every deadline
// in it, without an expiry refresh at every join. A join (round 1, whose
// line read is its own, and a later round) into a line with more than
// ENTRY_MS left leaves its expiry alone; into one with less, or none, it
// gives the line 2 * ENTRY_MS. Mutations checked: join refreshing at every
// call (the long expiry cut to 6 s), and never refreshing a line that
// exists (the short expiry kept, below the new entry's deadline).
func TestAJoinGivesTheLineTimeOnlyWhenShort(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s := newSeqNode(ctx, t, "jttl", "k")
	const waiter, ticket = "w", "1000"
	inbox := inboxIn(s.lock, "A")
	other := "o/1 " + inboxIn(s.lock, "B") + " 99999999999999"
	entry := lockval.EntryTTL.Milliseconds()
	for _, round := range []string{"r:1", "r:2"} {
		for _, c := range []struct {
			name     string
			expire   []string // the line's expiry before the join
			min, max int64    // its PTTL after
		}{
			{"long", []string{"PEXPIRE", s.q, "60000"}, 2*entry + 1, 60000},
			{"short", []string{"PEXPIRE", s.q, "1000"}, entry, 2 * entry},
			{"none", []string{"PERSIST", s.q}, entry, 2 * entry},
		} {
			s.do(ctx, t, []string{"DEL", s.lock, s.q}, []string{"SET", s.lock, "other", "PX", "30000"},
				[]string{"ZADD", s.q, "500", other}, c.expire)
			if got := s.reserveAt(ctx, t, waiter, ticket, inbox, round); got[0] < 1 {
				t.Fatalf("%s, %s line: code %d, want the entry's seq", round, c.name, got[0])
			}
			if l := s.line(ctx); len(l) != 2 {
				t.Fatalf("%s, %s line: %q, want o and w", round, c.name, l)
			}
			pttl, err := s.n.Do(ctx, "PTTL", s.q).AsInt64()
			if err != nil {
				t.Fatal(err)
			}
			if pttl < c.min || pttl > c.max {
				t.Errorf("%s, %s line: PTTL %d after the join, want %d..%d", round, c.name, pttl, c.min, c.max)
			}
		}
	}
	s.do(ctx, t, []string{"DEL", s.lock, s.q})
}
