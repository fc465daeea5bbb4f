// Package lockval reads and writes, in Go, the values slotlock keeps in
// and beside lock keys (lock values, queue entries, permit holds) and the
// messages it publishes about them (hand-offs). The Lua side is batch/scripts/common.lua (holder_of,
// fence_of, and the '!' test in the scripts); the two must change
// together.
//
// A lock key holds a string, held, reserved or shared:
//
//		holder ['.' fence] ['!']                  held
//		'^' waiter ['!']                          reserved (an older version's hand-off)
//		'^' ticket ':' waiter ['/' seq] ':' inbox ['!']
//		                                          reserved (a waiter by reservation)
//		'~' [holder] ['!']                        held shared (Locker.Acquire)
//
//	  - holder: the lease token, or for reentrant leases the owner token
//	    (base64url: never '.', '!', '#', '^' or '~');
//	  - fence: the decimal fencing token of the grant, when fencing is on;
//	  - waiter: the lease token of the waiting acquisition the key is
//	    reserved for; only that acquisition takes it;
//	  - ticket: that acquisition's age, the server time in microseconds
//	    (decimal) when it started to wait; the smaller is older;
//	  - seq: the call of that acquisition the reservation rests on (the
//	    reserve call that wrote it, or the call that created the queue
//	    entry a hand-off popped; docs/design.md, "Waiting by reservation
//	    across processes"), decimal, positive; a value without it (an
//	    older version) reads as seq 0;
//	  - inbox: the sharded channel its Locker listens on, on the key's node
//	    (it ends with the Locker's base64url id, never with '!');
//	  - '~': shared holders hold the key: the one holder's lease token
//	    follows it, or with several nothing does and they are listed, each
//	    with its expiry, in a sorted set beside the key
//	    (batch/scripts/shared.lua, which follows common.lua in the request
//	    form's scripts). To every other reader it is a key held by someone
//	    else: no token starts with '~';
//	  - '!': a waiter's mark; the key's queue may hold waiters, and the
//	    release of a marked key hands it to the oldest of them (or, with
//	    none, deletes it).
//
// The queue of a key and the reservation's expiry live in the Lua side
// only (queue_key, RESERVE_MS and ENTRY_MS in common.lua); ReserveTTL and
// EntryTTL repeat the two durations for the Go code that states bounds.
package lockval

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"
	"time"
)

// ReserveTTL is RESERVE_MS of common.lua: the life of a reservation from
// its last write (a hand-off, or its waiter's own refresh), hence the
// longest a waiter that does not come (killed, cancelled) keeps a key from
// others.
const ReserveTTL = 500 * time.Millisecond

// EntryTTL is ENTRY_MS of common.lua: how long a waiter stays in a key's
// queue after its last attempt.
const EntryTTL = 3 * time.Second

// Reserve is the first byte of a reserved value.
const Reserve = "^"

// ReservedFor returns the waiter a reserved value names (its lease token,
// without the seq), and false for a held value (reserved_for in
// common.lua).
func ReservedFor(v string) (string, bool) {
	if r, ok := ParseReserved(v); ok {
		return r.Waiter, true
	}
	if !strings.HasPrefix(v, Reserve) {
		return "", false
	}
	return strings.TrimSuffix(v[1:], Mark), true
}

// Shared starts the value of a key held shared: SHARED in
// batch/scripts/shared.lua.
const Shared = "~"

// IsShared reports whether v is the value of a key held shared (is_shared
// in shared.lua).
func IsShared(v string) bool { return strings.HasPrefix(v, Shared) }

// Reservation is a reserved value of a waiter by reservation.
type Reservation struct {
	Ticket int64 // microseconds of server time; the smaller is older
	Waiter string
	Inbox  string
	Marked bool
	// Seq is the call the reservation rests on; 0 when the value has none
	// (written by an older version: never evidence for a grant).
	Seq int64
}

// ParseReserved reads '^' ticket ':' waiter ['/' seq] ':' inbox ['!']
// (res_parse in common.lua), and returns false for any other value (a seq
// that is empty, not decimal or not positive included).
func ParseReserved(v string) (Reservation, bool) {
	rest, ok := strings.CutPrefix(v, Reserve)
	if !ok {
		return Reservation{}, false
	}
	ticket, rest, ok := strings.Cut(rest, ":")
	if !ok {
		return Reservation{}, false
	}
	t, err := strconv.ParseInt(ticket, 10, 64)
	if err != nil || t < 0 {
		return Reservation{}, false
	}
	waiter, inbox, ok := strings.Cut(rest, ":")
	if !ok || waiter == "" {
		return Reservation{}, false
	}
	var seq int64
	if w, s, cut := strings.Cut(waiter, "/"); cut {
		n, ok := parseSeq(s)
		if !ok || w == "" {
			return Reservation{}, false
		}
		waiter, seq = w, n
	}
	r := Reservation{Ticket: t, Waiter: waiter, Seq: seq, Inbox: inbox}
	r.Inbox, r.Marked = strings.CutSuffix(inbox, Mark)
	return r, true
}

// FormatReserved writes r in the form ParseReserved reads (reserve.lua
// writes the same bytes).
func FormatReserved(r Reservation) string {
	v := Reserve + strconv.FormatInt(r.Ticket, 10) + ":" + r.Waiter
	if r.Seq > 0 {
		v += "/" + strconv.FormatInt(r.Seq, 10)
	}
	v += ":" + r.Inbox
	if r.Marked {
		v += Mark
	}
	return v
}

// MaxSeq bounds a call's seq: 15 decimal digits, below 2^53, so that Lua
// compares seqs exactly as numbers (tonumber).
const MaxSeq = 999_999_999_999_999

// parseSeq reads a seq: decimal digits only, 1..MaxSeq.
func parseSeq(s string) (int64, bool) {
	if s == "" || len(s) > 15 || strings.Trim(s, "0123456789") != "" {
		return 0, false
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil && n > 0
}

// Mark is the waiter's mark, the last byte of a marked value.
const Mark = "!"

// HandOff starts the message a release publishes on the waiter's inbox
// when it hands the key to it (hand_off in common.lua): HandOff + lock key +
// ' ' + waiter ['/' seq], seq naming the call that created the popped
// queue entry (ParseHandOff).
const HandOff = "h "

// Yield starts the message reserve.lua publishes on a waiter's inbox to
// ask it to give a reserved key to an older waiter: Yield + lock key + ' '
// + waiter.
const Yield = "y "

// ParseHandOff splits the last field of a message on an inbox, waiter
// ['/' seq], into the waiter's token and the seq (0 when there is none or
// it is malformed: never evidence).
func ParseHandOff(field string) (waiter string, seq int64) {
	w, s, cut := strings.Cut(field, "/")
	if !cut {
		return field, 0
	}
	n, _ := parseSeq(s)
	return w, n
}

// HeldBy reports whether v belongs to the plain lease or owner holder: a
// held value of holder (any fence, marked or not), as is_mine in
// reentrant/hold.lua reads it. Shared values and reservations are not,
// even a reservation naming holder: a lease holds its keys from its grant.
func HeldBy(v, holder string) bool {
	return v != "" && v[0] != '^' && v[0] != '~' && Holder(v) == holder
}

// Holder returns the holder part of v (holder_of in common.lua).
func Holder(v string) string {
	if i := strings.IndexAny(v, ".!"); i >= 0 {
		return v[:i]
	}
	return v
}

// Marked reports whether a waiter marked v.
func Marked(v string) bool { return strings.HasSuffix(v, Mark) }

// OfPlain reports whether v belongs to a lease whose value has no fencing
// token (every value the pipeline strategy writes): the token itself, or
// the token with a waiter's mark.
func OfPlain(v, token string) bool {
	return len(v) >= len(token) && v[:len(token)] == token && (len(v) == len(token) || v[len(token):] == Mark)
}

// Value is a lock value taken apart, for readers that show it (Inspect)
// rather than compare it with their own token.
type Value struct {
	// Holder is the holder part of a held value ("" for a reservation).
	Holder string
	// Fence is the fencing token of the grant, 0 when it has none.
	Fence int64
	// Waiter is the waiter a reserved value names ("" for a held value).
	Waiter string
	// Marked: a waiter marked the value (Marked).
	Marked bool
	// Shared: the key is held shared; Holder is then its one holder's
	// lease token, "" when several hold it.
	Shared bool
}

// Parse takes v apart (holder_of, fence_of and reserved_for in
// common.lua).
func Parse(v string) Value {
	out := Value{Marked: Marked(v)}
	if w, ok := ReservedFor(v); ok {
		out.Waiter = w
		return out
	}
	out.Holder = Holder(v)
	if IsShared(v) {
		out.Shared, out.Holder = true, out.Holder[len(Shared):]
		return out
	}
	if d := strings.IndexByte(v, '.'); d >= 0 {
		// fence_of reads a malformed fence as 0: so does this.
		out.Fence, _ = strconv.ParseInt(strings.TrimSuffix(v[d+1:], Mark), 10, 64)
	}
	return out
}

// QueueJoined converts a score of a key's queue (P{T}#q:K: the waiter's
// ticket, server time in microseconds) to the moment the waiter started
// to wait.
func QueueJoined(score float64) time.Time { return time.UnixMicro(int64(score)) }

// Entry is a member of a key's queue taken apart (entry_parse in
// common.lua): token '/' seq ' ' inbox [QueueReader] ' ' deadline.
type Entry struct {
	Token string // the waiter's lease token
	// Seq is the call of the acquisition that created the entry; 0 for an
	// entry without one (an older version's) or a malformed one.
	Seq   int64
	Inbox string // "" for an older version's waiter in line
	// Reader: the entry is a reader's, for a shared key.
	Reader bool
	// Deadline: the entry counts for nothing after it unless its waiter
	// joins again (server time, ms); zero in an older version's entry,
	// which lives as long as its queue.
	Deadline time.Time
}

// QueueEntry takes a member of a key's queue apart. An inbox's last word
// holds '{', so a last word of digits is the deadline.
func QueueEntry(member string) Entry {
	head, rest, _ := strings.Cut(member, " ")
	var e Entry
	if sp := strings.LastIndexByte(rest, ' '); sp >= 0 {
		if ms, err := strconv.ParseUint(rest[sp+1:], 10, 63); err == nil {
			e.Deadline, rest = time.UnixMilli(int64(ms)), rest[:sp]
		}
	}
	e.Inbox, e.Reader = strings.CutSuffix(rest, QueueReader)
	token, s, cut := strings.Cut(head, "/")
	e.Token = token
	if cut {
		e.Seq, _ = parseSeq(s)
	}
	return e
}

// QueueReader follows the inbox in the queue entry of a waiter by
// reservation for a shared key (READER in common.lua).
const QueueReader = "~"

// Short is the short, non-secret form of a holder or waiter token that
// inspections show: the first 48 bits of its SHA-256, in hex. A token is
// 128 random bits (or an HMAC of that size): a prefix of its hash tells
// holders apart in a listing and gives nothing towards releasing.
func Short(token string) string {
	h := sha256.Sum256([]byte(token))
	return hex.EncodeToString(h[:6])
}

// PermitLimit is the field of a permit hash (P{T}#p:R) that holds the
// limit its holders asked for (LIMIT_FIELD in shared.lua); every other
// field is a holder's lease token.
const PermitLimit = "#l"

// ParsePermitHold reads a permit holder's field value, units ':' expiry
// (milliseconds of server time), as read_holders in shared.lua does; ok
// is false for a malformed value, which the scripts count as expired.
func ParsePermitHold(v string) (units, expiresMs int64, ok bool) {
	u, e, found := strings.Cut(v, ":")
	if !found {
		return 0, 0, false
	}
	units, err1 := strconv.ParseInt(u, 10, 64)
	expiresMs, err2 := strconv.ParseInt(e, 10, 64)
	return units, expiresMs, err1 == nil && err2 == nil
}
