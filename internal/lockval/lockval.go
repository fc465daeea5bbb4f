// Package lockval is the Go side of the lock value format. The Lua side is
// batch/scripts/common.lua (holder_of, fence_of, and the '!' test in the
// scripts); the two must change together.
//
// A lock key holds a string:
//
//		holder ['.' fence] ['!']
//
//	  - holder: the lease token, or for reentrant leases the owner token
//	    (base64url: never '.', '!' or '#');
//	  - fence: the decimal fencing token of the grant, when fencing is on;
//	  - '!': a waiter's mark; the release of a marked key publishes a
//	    wake-up on the sharded channel named like the key.
package lockval

import (
	"strconv"
	"strings"
)

// Mark is the waiter's mark, the last byte of a marked value.
const Mark = "!"

// Holder returns the holder part of v (holder_of in common.lua).
func Holder(v string) string {
	if i := strings.IndexAny(v, ".!"); i >= 0 {
		return v[:i]
	}
	return v
}

// Fence returns the fencing token of v, 0 when it has none (fence_of in
// common.lua).
func Fence(v string) int64 {
	d := strings.IndexByte(v, '.')
	if d < 0 {
		return 0
	}
	rest := strings.TrimSuffix(v[d+1:], Mark)
	n, err := strconv.ParseInt(rest, 10, 64)
	if err != nil {
		return 0
	}
	return n
}

// Marked reports whether a waiter marked v.
func Marked(v string) bool { return strings.HasSuffix(v, Mark) }

// OfPlain reports whether v belongs to a lease whose value has no fencing
// token (every value the pipeline strategy writes): the token itself, or
// the token with a waiter's mark.
func OfPlain(v, token string) bool {
	return len(v) >= len(token) && v[:len(token)] == token && (len(v) == len(token) || v[len(token):] == Mark)
}

// Format returns the value a grant writes: holder, and ".fence" when fence
// is above zero.
func Format(holder string, fence int64) string {
	if fence <= 0 {
		return holder
	}
	return holder + "." + strconv.FormatInt(fence, 10)
}
