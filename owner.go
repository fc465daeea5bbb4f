package slotlock

import (
	"context"

	"github.com/slotlock/slotlock/reentrant"
)

// WithOwner returns a context that carries an owner identity: every lease
// taken with it (or a context derived from it) belongs to id. An owner that
// already holds a key can lock it again; each lease then counts as one
// hold, and the key is free when the last of them is released. Other
// owners stay excluded throughout. It is the Go form of a lock that is
// reentrant per thread: pass a request or job id.
//
// Reentrancy is per Locker: the identity written into Redis is derived from
// id and a secret of the Locker, so another Locker (another process) with
// the same id is another owner, and nobody can forge an owner's holds by
// guessing its id.
func WithOwner(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, ownerKey{}, id)
}

// OwnerFrom returns the owner identity WithOwner put into ctx; an empty id
// is no owner.
func OwnerFrom(ctx context.Context) (string, bool) {
	id, ok := ctx.Value(ownerKey{}).(string)
	return id, ok && id != ""
}

// ownerKey is the context key of WithOwner.
type ownerKey struct{}

func (l *Locker) ownerToken(id string) string { return reentrant.OwnerToken(l.secret[:], id) }
