// Package lockval is the Go side of the lock value format. The Lua side is
// batch/scripts/common.lua (holder_of, fence_of, and the '!' test in the
// scripts); the two must change together.
//
// A lock key holds a string, held or reserved:
//
//		holder ['.' fence] ['!']      held
//		'^' waiter ['!']              reserved
//
//	  - holder: the lease token, or for reentrant leases the owner token
//	    (base64url: never '.', '!', '#' or '^');
//	  - fence: the decimal fencing token of the grant, when fencing is on;
//	  - waiter: the lease token of the waiting acquisition a release handed
//	    the key to; only that acquisition's next attempt takes it;
//	  - '!': a waiter's mark; the key's queue may hold waiters, and the
//	    release of a marked key hands it to the oldest of them (or, with
//	    none, deletes it and publishes a wake-up on the sharded channel
//	    named like the key).
//
// The queue of a key and the reservation's expiry live in the Lua side
// only (queue_keys, RESERVE_MS and ENTRY_MS in common.lua); ReserveTTL and
// EntryTTL repeat the two durations for the Go code that states bounds.
package lockval

import (
	"strings"
	"time"
)

// ReserveTTL is RESERVE_MS of common.lua: the life of a reservation, never
// renewed, hence the longest a waiter that does not come (killed,
// cancelled) keeps a key from others.
const ReserveTTL = 500 * time.Millisecond

// EntryTTL is ENTRY_MS of common.lua: how long a waiter stays in a key's
// queue after its last attempt.
const EntryTTL = 3 * time.Second

// Reserve is the first byte of a reserved value.
const Reserve = "^"

// ReservedFor returns the waiter a reserved value names, and false for a
// held value (reserved_for in common.lua).
func ReservedFor(v string) (string, bool) {
	if !strings.HasPrefix(v, Reserve) {
		return "", false
	}
	return strings.TrimSuffix(v[1:], Mark), true
}

// Mark is the waiter's mark, the last byte of a marked value.
const Mark = "!"

// HandOff starts the message a release publishes on a key's channel when
// it hands the key to a waiter: HandOff + the waiter's lease token
// (hand_off in common.lua). A plain release publishes "r".
const HandOff = "h "

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
