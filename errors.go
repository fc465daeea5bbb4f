package slotlock

import (
	"errors"
	"fmt"
	"strings"

	"github.com/slotlock/slotlock/batch"
)

var (
	// ErrNotAcquired reports that some keys are held by others. The error
	// is a *ConflictError that names them and says for how long.
	ErrNotAcquired = batch.ErrNotAcquired
	// ErrNotHeld reports keys a lease no longer holds: they expired, were
	// deleted by an operator, or were taken by someone else after expiry.
	// The error is a *LostError naming them.
	ErrNotHeld = errors.New("slotlock: lock not held")
	// ErrLeaseLost is the cause a lease's context gets when any of its keys
	// is found lost; errors.Is(err, ErrNotHeld) holds for it too.
	ErrLeaseLost = fmt.Errorf("%w: lease lost", ErrNotHeld)
	// ErrInvalid reports bad input: no keys, an empty key, too many keys, a
	// bad TTL, a nil client. Nothing was sent to Redis.
	ErrInvalid = errors.New("slotlock: invalid argument")
	// ErrUnsupported reports a feature the Locker's strategy cannot give:
	// reentrancy, fencing tokens and guarded writes need scripts.
	ErrUnsupported = errors.New("slotlock: not supported by this strategy")
	// ErrClosed reports use of a Locker after Close.
	ErrClosed = errors.New("slotlock: locker closed")
	// ErrRedis wraps an error reply or a transport error of one node; the
	// message names the node.
	ErrRedis = batch.ErrRedis
	// ErrReplicas reports that fewer replicas than Options.MinReplicas
	// acknowledged the lock writes in time. The error is a *ReplicaError.
	ErrReplicas = batch.ErrReplicas
	// ErrUnknownOutcome reports a call whose reply never came: the keys it
	// carried were released owner-checked, or expire by their TTL.
	ErrUnknownOutcome = batch.ErrUnknownOutcome
)

// ConflictError lists the keys that stopped an acquisition and how long
// their holders' locks have left.
type ConflictError = batch.ConflictError

// KeyConflict is one entry of a ConflictError.
type KeyConflict = batch.KeyConflict

// ReplicaError names the masters whose replicas fell short.
type ReplicaError = batch.ReplicaError

// NodeError is the failure of one call to one node; it names the node.
type NodeError = batch.NodeError

// LostError names the keys a lease found it no longer holds.
type LostError struct {
	Keys []string
}

func (e *LostError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "slotlock: %d key(s) no longer held:", len(e.Keys))
	for i, k := range e.Keys {
		if i == 8 {
			fmt.Fprintf(&b, " and %d more", len(e.Keys)-i)
			break
		}
		fmt.Fprintf(&b, " %q", k)
	}
	return b.String()
}

// Is makes errors.Is(err, ErrNotHeld) and errors.Is(err, ErrLeaseLost) true.
func (e *LostError) Is(target error) bool { return target == ErrNotHeld || target == ErrLeaseLost }
