package reentrant

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	_ "embed"
	"encoding/base64"
)

// HoldLua is the Lua of hold sets (hold_key, is_mine), composed into every
// batch script: Redis scripts have no include, and the per-slot scripts
// must stay single scripts to stay atomic.
//
//go:embed hold.lua
var HoldLua string

type ownerKey struct{}

// WithOwner returns a context carrying the owner identity id.
func WithOwner(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, ownerKey{}, id)
}

// OwnerFrom returns the owner identity of ctx, if any.
func OwnerFrom(ctx context.Context) (string, bool) {
	id, ok := ctx.Value(ownerKey{}).(string)
	return id, ok && id != ""
}

// OwnerToken is what all leases of owner id write into their lock keys:
// 128 bits of HMAC-SHA256(secret, id), URL-safe. The secret belongs to one
// Locker, so owner ids cannot be forged by guessing them, and the same id
// under another Locker is another owner.
func OwnerToken(secret []byte, id string) string {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(id))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil)[:16])
}
