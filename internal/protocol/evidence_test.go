package protocol

import "testing"

// The evidence state machine against its ABA cases: each case feeds
// rounds sent, their replies per key, hand-off messages and failed
// confirms, and checks whether the confirm is due.

// ev is one event or check of a case.
type ev struct {
	send  bool       // a round sent (its seq is the next)
	reply []KeyReply // the reply of the round out, per key
	msg   *msg       // a hand-off
	fail  bool       // a confirm that did not grant
	check *bool      // whether the confirm is due
}

type msg struct {
	key    int
	seq    int64
	accept bool
}

func sendRound() ev                 { return ev{send: true} }
func replyOf(keys ...KeyReply) ev   { return ev{reply: keys} }
func handOff(key int, seq int64) ev { return ev{msg: &msg{key, seq, true}} }
func dropped(key int, seq int64) ev { return ev{msg: &msg{key, seq, false}} }
func waiting() ev                   { f := false; return ev{check: &f} }
func confirms() ev                  { t := true; return ev{check: &t} }
func confirmFails() ev              { return ev{fail: true} }
func mine() KeyReply                { return KeyReply{Mine: true} }
func entry(e int64) KeyReply        { return KeyReply{Entry: e} }
func lostReply() KeyReply           { return KeyReply{Unknown: true} }
func staleReply() KeyReply          { return KeyReply{Stale: true} }
func failedReply() KeyReply         { return KeyReply{} }

func TestEvidence(t *testing.T) {
	for _, tc := range []struct {
		name   string
		n      int
		events []ev
	}{
		{
			// Case (a): m(3) is accepted, then round 4 reports that it
			// gave the key away and stands under entry 4: no grant, and
			// m(3) again is stale. Mutation: ignoring reply codes >= 1.
			name: "a-own-give-away", n: 1,
			events: []ev{
				sendRound(), replyOf(entry(1)), sendRound(), replyOf(entry(1)), sendRound(), replyOf(entry(3)),
				handOff(0, 3), confirms(),
				sendRound(), replyOf(entry(4)), waiting(), // round 4 gave the key to an older waiter
				dropped(0, 3), waiting(),
			},
		},
		{
			// Case (b): round 3 re-joined (entry 3) after the key handed to
			// entry 1 lapsed; the delayed m(1) comes after. Mutation:
			// accepting every message naming a sent round.
			name: "b-delayed-message-after-rejoin", n: 1,
			events: []ev{
				sendRound(), replyOf(entry(1)), sendRound(), replyOf(entry(1)), sendRound(), replyOf(entry(3)),
				dropped(0, 1), waiting(),
			},
		},
		{
			// Case (a'): round 3 kept entry 1; the hand-off popped entry 1
			// after it: accepted. Mutation: the floor set to the reply's
			// round instead of its entry (m(1) dropped).
			name: "a-prime-refresh-then-hand-off", n: 1,
			events: []ev{
				sendRound(), replyOf(entry(1)), sendRound(), replyOf(entry(1)), sendRound(), replyOf(entry(1)),
				handOff(0, 1), confirms(),
			},
		},
		{
			// Case (d): m(5) while round 5 is out: no confirm until
			// its reply (rule I), which reports entry 5: then the confirm.
			// And m(5) while round 6 is out, whose reply says it gave the
			// key away: never a confirm. Mutation: confirming with a round
			// in flight.
			name: "d-message-before-its-reply", n: 1,
			events: []ev{
				sendRound(), replyOf(entry(1)), sendRound(), replyOf(entry(1)), sendRound(), replyOf(entry(1)),
				sendRound(), replyOf(entry(1)),
				sendRound(), handOff(0, 5), waiting(), replyOf(entry(5)), confirms(),
				sendRound(), waiting(), replyOf(entry(6)), waiting(),
			},
		},
		{
			// Case (d) at once: the message before the reply of the
			// round that created its entry.
			name: "d-message-then-reply", n: 1,
			events: []ev{
				sendRound(), handOff(0, 1), waiting(), replyOf(entry(1)), confirms(),
			},
		},
		{
			// Case (c): round 4's reply is lost for keys 0 and 1 and
			// answered for key 2: the evidence of 0 and 1 from round 3 is
			// dropped, key 2's kept; m(3) for key 0 is stale, m(4)
			// accepted (round 4 created the entry it popped, so it ran).
			// Mutation: no rule L.
			name: "c-lost-reply", n: 3,
			events: []ev{
				sendRound(), replyOf(entry(1), entry(1), entry(1)),
				sendRound(), replyOf(entry(1), entry(1), entry(1)),
				sendRound(), replyOf(mine(), mine(), mine()), confirms(),
				sendRound(), replyOf(lostReply(), lostReply(), mine()), waiting(),
				dropped(0, 3), waiting(),
				handOff(0, 4), waiting(),
				dropped(1, 3), sendRound(), replyOf(staleReply(), mine(), mine()), confirms(),
			},
		},
		{
			// Open question 6: one round, one seq, two nodes: round 2 is
			// lost on key 0's node and answered on key 1's (entry 1
			// kept). Rule L is per key: the hand-off of key 1's entry 1,
			// which follows round 2, is still evidence. Round 3 then
			// reserves key 0 (and fails on key 1's node, which writes
			// nothing): the confirm is due. Mutation: rule L applied to
			// every key of the round.
			name: "q6-round-lost-on-one-node-answered-on-another", n: 2,
			events: []ev{
				sendRound(), replyOf(mine(), entry(1)),
				sendRound(), replyOf(lostReply(), entry(1)), waiting(),
				handOff(1, 1), waiting(), dropped(0, 1),
				sendRound(), replyOf(mine(), failedReply()), confirms(), // key 1's node refused round 3: nothing written
			},
		},
		{
			// A confirm that failed forgets every key; a round brings
			// them back. A message naming no round of this acquisition
			// is dropped.
			name: "confirm-failed", n: 2,
			events: []ev{
				sendRound(), replyOf(mine(), mine()), confirms(), confirmFails(), waiting(),
				dropped(0, 9),
				sendRound(), replyOf(mine(), entry(2)), waiting(), handOff(1, 2), confirms(),
			},
		},
		{
			// A reply reporting entry e drops evidence naming a later
			// round too: round 2's reply was lost, round 3 reserved the
			// key, and round 4 finds it taken and the waiter under entry
			// 2 (round 2 ran late, after round 3's reservation was
			// gone). Mutation: the first draft's "drop iff seq < e".
			name: "entry-below-the-evidence", n: 1,
			events: []ev{
				sendRound(), replyOf(entry(1)), sendRound(), replyOf(lostReply()),
				sendRound(), replyOf(mine()), confirms(),
				sendRound(), replyOf(entry(2)), waiting(),
			},
		},
		{
			// A stale reply (a later round wrote the key) changes nothing.
			name: "stale-reply", n: 1,
			events: []ev{
				sendRound(), replyOf(entry(1)), handOff(0, 1), confirms(),
				sendRound(), replyOf(staleReply()), confirms(),
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWaitState(tc.n)
			var seq int64
			for j, e := range tc.events {
				switch {
				case e.send:
					seq = w.send()
				case e.reply != nil:
					w.reply(seq, Reservations{Keys: e.reply})
				case e.msg != nil:
					if got := w.handOff(e.msg.key, e.msg.seq); got != e.msg.accept {
						t.Errorf("event %d: hand-off of key %d naming round %d accepted %v, want %v", j, e.msg.key, e.msg.seq, got, e.msg.accept)
					}
				case e.fail:
					w.confirmFailed()
				case e.check != nil:
					if got := w.ready(); got != *e.check {
						t.Errorf("event %d: confirm due %v, want %v", j, got, *e.check)
					}
				}
			}
		})
	}
}
