package protocol

import (
	"testing"
	"time"
)

// The evidence state machine against the cases of
// docs/proposals/direct-grant.md, 2.4 and 6.4, with a fake clock: each
// case feeds rounds sent (at a time), their replies per key, hand-off
// messages and failed confirms, and checks the verdict at given times.
// "direct" is what the waiter would do with the direct grant on (decide
// with direct set); with it off it confirms whenever that one grants.

// Times are ms after t0; ReserveTTL (R) is 500 ms, so R/4 = 125 ms.
var t0 = time.Unix(1_800_000_000, 0)

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

// ev is one event or check of a case.
type ev struct {
	send  int        // a round sent at ms (its seq is the next)
	reply []KeyReply // the reply of the round out, per key
	msg   *msg       // a hand-off
	fail  bool       // a confirm that did not grant
	check *check     // the verdict at a time
	ms    int        // the time of send or check
}

type msg struct {
	key    int
	seq    int64
	accept bool
}

type check struct {
	want     verdict
	deadline int // ms, with want == grantDirect
}

func sendAt(ms int) ev              { return ev{send: 1, ms: ms} }
func replyOf(keys ...KeyReply) ev   { return ev{reply: keys} }
func handOff(key int, seq int64) ev { return ev{msg: &msg{key, seq, true}} }
func dropped(key int, seq int64) ev { return ev{msg: &msg{key, seq, false}} }
func waiting(ms int) ev             { return ev{check: &check{want: keepWaiting}, ms: ms} }
func confirms(ms int) ev            { return ev{check: &check{want: confirm}, ms: ms} }
func direct(ms, deadline int) ev {
	return ev{check: &check{want: grantDirect, deadline: deadline}, ms: ms}
}
func confirmFails() ev       { return ev{fail: true} }
func mine() KeyReply         { return KeyReply{Mine: true} }
func entry(e int64) KeyReply { return KeyReply{Entry: e} }
func lostReply() KeyReply    { return KeyReply{Unknown: true} }
func staleReply() KeyReply   { return KeyReply{Stale: true} }
func failedReply() KeyReply  { return KeyReply{} }

func TestEvidence(t *testing.T) {
	for _, tc := range []struct {
		name   string
		n      int
		direct bool // the lease may be granted directly (2.6)
		events []ev
	}{
		{
			// Case (a): m(3) is accepted, then round 4 reports that it
			// gave the key away and stands under entry 4: no grant, and
			// m(3) again is stale. Mutation: ignoring reply codes >= 1.
			name: "a-own-give-away", n: 1, direct: true,
			events: []ev{
				sendAt(0), replyOf(entry(1)), sendAt(10), replyOf(entry(1)), sendAt(20), replyOf(entry(3)),
				handOff(0, 3), direct(25, 20+500),
				sendAt(40), replyOf(entry(4)), waiting(45), // round 4 gave the key to an older waiter
				dropped(0, 3), waiting(46),
			},
		},
		{
			// Case (b): round 3 re-joined (entry 3) after the key handed to
			// entry 1 lapsed; the delayed m(1) comes after. Mutation:
			// accepting every message naming a sent round.
			name: "b-delayed-message-after-rejoin", n: 1, direct: true,
			events: []ev{
				sendAt(0), replyOf(entry(1)), sendAt(10), replyOf(entry(1)), sendAt(600), replyOf(entry(3)),
				dropped(0, 1), waiting(605),
			},
		},
		{
			// Case (a'): round 3 kept entry 1; the hand-off popped entry 1
			// after it: accepted, D = send(3) + R (round 3 saw entry 1
			// still queued, so the pop, and the reservation's write,
			// came after round 3 ran); confirm once D is less than R/4
			// ahead (rule M). Mutation: the floor set to the reply's
			// round instead of its entry (m(1) dropped).
			name: "a-prime-refresh-then-hand-off", n: 1, direct: true,
			events: []ev{
				sendAt(0), replyOf(entry(1)), sendAt(100), replyOf(entry(1)), sendAt(200), replyOf(entry(1)),
				handOff(0, 1), direct(210, 700), direct(575, 700), confirms(576),
			},
		},
		{
			// Case (d): m(5) while round 5 is out: no grant until its
			// reply (rule I), which reports entry 5: then the grant.
			// And m(5) while round 6 is out, whose reply says it gave the
			// key away: never a grant. Mutation: granting with a round
			// in flight.
			name: "d-message-before-its-reply", n: 1, direct: true,
			events: []ev{
				sendAt(0), replyOf(entry(1)), sendAt(10), replyOf(entry(1)), sendAt(20), replyOf(entry(1)),
				sendAt(30), replyOf(entry(1)),
				sendAt(40), handOff(0, 5), waiting(41), replyOf(entry(5)), direct(42, 40+500),
				sendAt(50), waiting(51), replyOf(entry(6)), waiting(52),
			},
		},
		{
			// Case (d), not direct: the same evidence makes a confirm.
			name: "d-not-direct-confirms", n: 1, direct: false,
			events: []ev{
				sendAt(0), handOff(0, 1), waiting(1), replyOf(entry(1)), confirms(2),
			},
		},
		{
			// Case (c): round 4's reply is lost for keys 0 and 1 and
			// answered for key 2: the evidence of 0 and 1 from round 3 is
			// dropped, key 2's kept; m(3) for key 0 is stale, m(4)
			// accepted (round 4 created the entry it popped, so it ran).
			// Mutation: no rule L.
			name: "c-lost-reply", n: 3, direct: true,
			events: []ev{
				sendAt(0), replyOf(entry(1), entry(1), entry(1)),
				sendAt(10), replyOf(entry(1), entry(1), entry(1)),
				sendAt(20), replyOf(mine(), mine(), mine()), direct(21, 520),
				sendAt(30), replyOf(lostReply(), lostReply(), mine()), waiting(31),
				dropped(0, 3), waiting(32),
				handOff(0, 4), waiting(33),
				dropped(1, 3), sendAt(40), replyOf(staleReply(), mine(), mine()), direct(41, 530),
			},
		},
		{
			// Open question 6: one round, one seq, two nodes: round 2 is
			// lost on key 0's node and answered on key 1's (entry 1
			// kept). Rule L is per key: the hand-off of key 1's entry 1,
			// which follows round 2, is still evidence. Round 3 then
			// reserves key 0 (and fails on key 1's node, which writes
			// nothing): granted, D from key 1's round 2, the last that
			// saw entry 1 still queued. Mutation: rule L applied to
			// every key of the round.
			name: "q6-round-lost-on-one-node-answered-on-another", n: 2, direct: true,
			events: []ev{
				sendAt(0), replyOf(mine(), entry(1)),
				sendAt(100), replyOf(lostReply(), entry(1)), waiting(101),
				handOff(1, 1), waiting(102), dropped(0, 1),
				sendAt(110), replyOf(mine(), failedReply()), direct(120, 600), // key 1's node refused round 3: nothing written
			},
		},
		{
			// The deadline: from the last round that saw the popped entry
			// still queued (or the round the evidence names), never the
			// message's receipt nor the latest round. Round 1 created the
			// entry at 0, round 2 at 100 kept it, round 3 at 150 failed
			// (it saw nothing), the hand-off is read at 200: D = 100 + R.
			// At 600 - R/4 + 1 ms: confirm. Mutations: D from the latest
			// round (150 + R); D from the round the message names alone
			// (0 + R).
			name: "deadline-from-the-named-round", n: 1, direct: true,
			events: []ev{
				sendAt(0), replyOf(entry(1)), sendAt(100), replyOf(entry(1)), sendAt(150), replyOf(failedReply()),
				handOff(0, 1), direct(200, 600), direct(475, 600), confirms(476),
			},
		},
		{
			// The hand-off read before the reply of a round that saw its
			// entry still queued: that reply moves the basis up (the pop
			// came after the round ran). Mutation: reply not raising the
			// basis of evidence that names its entry (D = 0 + R: a
			// confirm at 360).
			name: "hand-off-before-the-refresh-reply", n: 1, direct: true,
			events: []ev{
				sendAt(0), replyOf(entry(1)), sendAt(300), handOff(0, 1), waiting(310),
				replyOf(entry(1)), direct(360, 800),
			},
		},
		{
			// The basis is the earliest of the keys': key 0 reserved by
			// round 1 at 0, key 1 by round 2 at 100.
			name: "deadline-min-over-keys", n: 2, direct: true,
			events: []ev{
				sendAt(0), replyOf(mine(), entry(1)), sendAt(100), replyOf(mine(), mine()),
				direct(110, 100+500),
				sendAt(120), replyOf(mine(), failedReply()), direct(130, 100+500), // a failed call writes nothing
			},
		},
		{
			// A confirm that failed forgets every key; a round brings
			// them back. A message naming no round of this acquisition
			// is dropped.
			name: "confirm-failed", n: 2, direct: false,
			events: []ev{
				sendAt(0), replyOf(mine(), mine()), confirms(1), confirmFails(), waiting(2),
				dropped(0, 9),
				sendAt(10), replyOf(mine(), entry(2)), waiting(11), handOff(1, 2), confirms(12),
			},
		},
		{
			// A reply reporting entry e drops evidence naming a later
			// round too: round 2's reply was lost, round 3 reserved the
			// key, and round 4 finds it taken and the waiter under entry
			// 2 (round 2 ran late, after round 3's reservation was
			// gone). The times keep D inside rule M's margin, so that
			// the case shows rule F alone. Mutation: the first draft's
			// "drop iff seq < e".
			name: "entry-below-the-evidence", n: 1, direct: true,
			events: []ev{
				sendAt(0), replyOf(entry(1)), sendAt(10), replyOf(lostReply()),
				sendAt(20), replyOf(mine()), direct(21, 520),
				sendAt(30), replyOf(entry(2)), waiting(31),
			},
		},
		{
			// A stale reply (a later round wrote the key) changes nothing.
			name: "stale-reply", n: 1, direct: true,
			events: []ev{
				sendAt(0), replyOf(entry(1)), handOff(0, 1), direct(1, 500),
				sendAt(10), replyOf(staleReply()), direct(11, 500),
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWaitState(tc.n)
			var seq int64
			for j, e := range tc.events {
				switch {
				case e.send != 0:
					seq = w.send(at(e.ms))
				case e.reply != nil:
					w.reply(seq, Reservations{Keys: e.reply})
				case e.msg != nil:
					if got := w.handOff(e.msg.key, e.msg.seq); got != e.msg.accept {
						t.Errorf("event %d: hand-off of key %d naming round %d accepted %v, want %v", j, e.msg.key, e.msg.seq, got, e.msg.accept)
					}
				case e.fail:
					w.confirmFailed()
				case e.check != nil:
					v, d := w.decide(at(e.ms), tc.direct)
					want := e.check.want
					if want == grantDirect && !tc.direct {
						t.Fatalf("bad case: direct check on a lease that may not")
					}
					if v != want {
						t.Errorf("event %d, at %d ms: verdict %d, want %d", j, e.ms, v, want)
					} else if want == grantDirect && !d.Equal(at(e.check.deadline)) {
						t.Errorf("event %d, at %d ms: deadline %v after t0, want %d ms", j, e.ms, d.Sub(t0), e.check.deadline)
					}
					if v == grantDirect || v == confirm {
						if dd, ok := w.deadline(); !ok || (v == grantDirect && !dd.Equal(d)) {
							t.Errorf("event %d: deadline() = %v, %v disagrees with decide", j, dd, ok)
						}
					}
				}
			}
		})
	}
}
