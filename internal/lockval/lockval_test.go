package lockval

import (
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	cases := []struct {
		v      string
		holder string
		marked bool
	}{
		{"tok", "tok", false},
		{"tok!", "tok", true},
		{"tok.42", "tok", false},
		{"tok.42!", "tok", true},
	}
	for _, c := range cases {
		if h, m := Holder(c.v), Marked(c.v); h != c.holder || m != c.marked {
			t.Errorf("%q: got (%q, %v), want (%q, %v)", c.v, h, m, c.holder, c.marked)
		}
	}
}

func TestOfPlain(t *testing.T) {
	for v, want := range map[string]bool{
		"tok": true, "tok!": true, "tok.3": false, "tokX": false, "to": false, "tok!!": false, "": false, "other": false, // a fenced Lua value ("tok.3") is never a pipeline lease's
	} {
		if got := OfPlain(v, "tok"); got != want {
			t.Errorf("OfPlain(%q, tok) = %v, want %v", v, got, want)
		}
	}
}

func TestReservedFor(t *testing.T) {
	for _, c := range []struct {
		v, waiter string
		ok        bool
	}{
		{"^abc", "abc", true},
		{"^abc!", "abc", true},
		{"abc", "", false},
		{"abc!", "", false},
		{"abc.7!", "", false},
	} {
		w, ok := ReservedFor(c.v)
		if w != c.waiter || ok != c.ok {
			t.Errorf("ReservedFor(%q) = %q, %v; want %q, %v", c.v, w, ok, c.waiter, c.ok)
		}
		if ok && (Holder(c.v) == c.waiter || OfPlain(c.v, c.waiter)) {
			t.Errorf("%q reads as held by its waiter", c.v)
		}
	}
}

func TestParseValue(t *testing.T) {
	for v, want := range map[string]Value{
		"tok":                             {Holder: "tok"},
		"tok!":                            {Holder: "tok", Marked: true},
		"tok.42":                          {Holder: "tok", Fence: 42},
		"tok.42!":                         {Holder: "tok", Fence: 42, Marked: true},
		"^w":                              {Waiter: "w"},
		"^w!":                             {Waiter: "w", Marked: true},
		"^1795542335123456:w:p{0}#in:id!": {Waiter: "w", Marked: true}, // a waiter by reservation
		"tok.x":                           {Holder: "tok"},             // fence_of: a malformed fence is 0
		"~tok":                            {Holder: "tok", Shared: true},
		"~tok!":                           {Holder: "tok", Shared: true, Marked: true},
		"~!":                              {Shared: true, Marked: true},
		"":                                {},
	} {
		if got := Parse(v); got != want {
			t.Errorf("Parse(%q) = %+v, want %+v", v, got, want)
		}
	}
}

func TestQueueScores(t *testing.T) {
	// enqueue writes TIME's seconds then %06d microseconds: 1764000000
	// s and 123456 us.
	if got := QueueJoined(1764000000123456); !got.Equal(time.Unix(1764000000, 123456000)) {
		t.Errorf("QueueJoined = %v", got)
	}
}

func TestShared(t *testing.T) {
	for v, want := range map[string]bool{"~": true, "~!": true, "~tok": true, "~tok!": true, "tok": false, "tok.3!": false, "^tok": false, "": false} {
		if got := IsShared(v); got != want {
			t.Errorf("IsShared(%q) = %v, want %v", v, got, want)
		}
	}
}

func TestParseReserved(t *testing.T) {
	for _, c := range []struct {
		v    string
		want Reservation
		ok   bool
	}{
		{"^1795542335123456:AAAAAAAAAAAAAAAAAAAAAA:p{0}#in:ZZZZ", Reservation{1795542335123456, "AAAAAAAAAAAAAAAAAAAAAA", "p{0}#in:ZZZZ", false, 0}, true},
		{"^12:abc:x:y:z!", Reservation{12, "abc", "x:y:z", true, 0}, true},
		{"^12:abc:!", Reservation{12, "abc", "", true, 0}, true},
		{"^abc", Reservation{}, false},      // handed to a waiter in line: no ticket
		{"^x1:abc:i", Reservation{}, false}, // not a ticket
		{"^12:abc", Reservation{}, false},
		{"^12::i", Reservation{}, false},
		{"abc!", Reservation{}, false},
		{"abc.7", Reservation{}, false},
	} {
		got, ok := ParseReserved(c.v)
		if ok != c.ok || got != c.want {
			t.Errorf("ParseReserved(%q) = %+v, %v; want %+v, %v", c.v, got, ok, c.want, c.ok)
		}
		if !ok {
			continue
		}
		if FormatReserved(got) != c.v {
			t.Errorf("FormatReserved(ParseReserved(%q)) = %q", c.v, FormatReserved(got))
		}
		if w, rok := ReservedFor(c.v); !rok || w != c.want.Waiter {
			t.Errorf("ReservedFor(%q) = %q, %v; want %q", c.v, w, rok, c.want.Waiter)
		}
		if Holder(c.v) == c.want.Waiter || OfPlain(c.v, c.want.Waiter) {
			t.Errorf("%q reads as held by its waiter", c.v)
		}
	}
}

// TestParseReservedWithSeq: the seq of a waiter by reservation's value
// (docs/design.md, "What slotlock keeps in Redis") is cut off the waiter, so that the
// waiter is the lease token every ownership test compares with.
func TestParseReservedWithSeq(t *testing.T) {
	for _, c := range []struct {
		v    string
		want Reservation
		ok   bool
	}{
		{"^12:tok/7:P{a}#in:id!", Reservation{Ticket: 12, Waiter: "tok", Seq: 7, Inbox: "P{a}#in:id", Marked: true}, true},
		{"^12:tok/7:P{a}#in:id", Reservation{Ticket: 12, Waiter: "tok", Seq: 7, Inbox: "P{a}#in:id"}, true},
		{"^12:tok:P{a}#in:id", Reservation{Ticket: 12, Waiter: "tok", Inbox: "P{a}#in:id"}, true}, // an older version's: seq 0
		{"^12:tok/999999999999999:i", Reservation{Ticket: 12, Waiter: "tok", Seq: MaxSeq, Inbox: "i"}, true},
		{"^12:tok/:in", Reservation{}, false},
		{"^12:tok/x:in", Reservation{}, false},
		{"^12:tok/0:in", Reservation{}, false},
		{"^12:tok/-3:in", Reservation{}, false},
		{"^12:tok/+3:in", Reservation{}, false},
		{"^12:tok/1000000000000000:in", Reservation{}, false}, // 16 digits: above Lua's exact range
		{"^12:/7:in", Reservation{}, false},
	} {
		got, ok := ParseReserved(c.v)
		if ok != c.ok || got != c.want {
			t.Errorf("ParseReserved(%q) = %+v, %v; want %+v, %v", c.v, got, ok, c.want, c.ok)
		}
		if !ok {
			continue
		}
		if FormatReserved(got) != c.v {
			t.Errorf("FormatReserved(ParseReserved(%q)) = %q", c.v, FormatReserved(got))
		}
		if w, rok := ReservedFor(c.v); !rok || w != c.want.Waiter {
			t.Errorf("ReservedFor(%q) = %q, %v; want %q", c.v, w, rok, c.want.Waiter)
		}
		if p := Parse(c.v); p.Waiter != c.want.Waiter || p.Marked != c.want.Marked {
			t.Errorf("Parse(%q) = %+v", c.v, p)
		}
	}
}

// TestQueueEntry: an entry of today, a reader's, one whose inbox has
// spaces and digits (a prefix may), and an older version's forms (no
// deadline: none is read off the inbox) all name the token (Inspect shows
// Short of it).
func TestQueueEntry(t *testing.T) {
	dl := time.UnixMilli(1764000003123)
	for _, c := range []struct {
		m    string
		want Entry
	}{
		{"tok/7 P{a}#in:id 1764000003123", Entry{Token: "tok", Seq: 7, Inbox: "P{a}#in:id", Deadline: dl}},
		{"tok/7 P{a}#in:id~ 1764000003123", Entry{Token: "tok", Seq: 7, Inbox: "P{a}#in:id", Reader: true, Deadline: dl}},
		{"tok/7 my 12 {a}#in:id 1764000003123", Entry{Token: "tok", Seq: 7, Inbox: "my 12 {a}#in:id", Deadline: dl}},
		{"tok/7 P{a}#in:id", Entry{Token: "tok", Seq: 7, Inbox: "P{a}#in:id"}},
		{"tok/7 my 12 {a}#in:id~", Entry{Token: "tok", Seq: 7, Inbox: "my 12 {a}#in:id", Reader: true}},
		{"tok P{a}#in:id", Entry{Token: "tok", Inbox: "P{a}#in:id"}},
		{"tok", Entry{Token: "tok"}},
		{"tok/x P{a}#in:id 5", Entry{Token: "tok", Inbox: "P{a}#in:id", Deadline: time.UnixMilli(5)}}, // malformed seq: never evidence
	} {
		if got := QueueEntry(c.m); got != c.want {
			t.Errorf("QueueEntry(%q) = %+v, want %+v", c.m, got, c.want)
		}
	}
}

// TestParseHandOff: the last field of a hand-off on an inbox.
func TestParseHandOff(t *testing.T) {
	for f, want := range map[string]struct {
		w   string
		seq int64
	}{"tok/7": {"tok", 7}, "tok": {"tok", 0}, "tok/": {"tok", 0}, "tok/x": {"tok", 0}} {
		if w, seq := ParseHandOff(f); w != want.w || seq != want.seq {
			t.Errorf("ParseHandOff(%q) = %q, %d; want %q, %d", f, w, seq, want.w, want.seq)
		}
	}
}

// TestHeldBy: the values a plain lease's owner-checked scripts take as
// its own (is_mine in reentrant/hold.lua): held values only.
func TestHeldBy(t *testing.T) {
	for v, want := range map[string]bool{
		"tok":                     true,
		"tok!":                    true,
		"tok.42":                  true,
		"tok.42!":                 true,
		"^12:tok/5:P{a}#in:id":    false, // reserved for tok: not a hold
		"^12:tok/5:P{a}#in:id!":   false,
		"^12:tok:P{a}#in:id!":     false, // an older version's reservation
		"^tok!":                   false, // handed to a waiter in line (reserved_for)
		"tokX":                    false,
		"tokX.3":                  false,
		"^12:tokX/5:P{a}#in:id":   false, // our token is a prefix of its
		"^12:other/5:P{a}#in:id!": false,
		"~tok":                    false, // shared forms
		"~tok!":                   false,
		"~":                       false,
		"":                        false,
	} {
		if got := HeldBy(v, "tok"); got != want {
			t.Errorf("HeldBy(%q, tok) = %v, want %v", v, got, want)
		}
	}
}
