package reentrant

import (
	"crypto/hmac"
	"crypto/sha256"
	_ "embed"
	"encoding/base64"
)

//go:embed hold.lua
var holdLua string

// HoldLua returns the Lua of hold sets (is_mine), which package
// batch composes into every script: Redis scripts have no include, and the
// per-slot scripts must stay single scripts to stay atomic. It is a
// function, not a variable, so that nobody can change the scripts at run
// time.
func HoldLua() string { return holdLua }

// OwnerToken is what all leases of owner id write into their lock keys:
// 128 bits of HMAC-SHA256(secret, id), URL-safe. The secret belongs to one
// Locker, so owner ids cannot be forged by guessing them, and the same id
// under another Locker is another owner.
func OwnerToken(secret []byte, id string) string {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(id))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil)[:16])
}
