package slotlock

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/slotlock/slotlock/internal/protocol"
	"github.com/slotlock/slotlock/internal/rediserr"
	"github.com/slotlock/slotlock/internal/topology"
)

// Every error slotlock returns matches one of these with errors.Is, and its
// message starts with "slotlock:". Where more is known (which keys, which
// node), the error is also one of the types below, for errors.As.
var (
	// ErrNotAcquired: some keys are held by others. The error is a
	// *ConflictError that names them and says for how long.
	ErrNotAcquired = protocol.ErrNotAcquired
	// ErrNotHeld: keys a lease no longer holds: they expired, were
	// deleted by an operator, or were taken by someone else after expiry.
	// The error is a *LostError naming them.
	ErrNotHeld = errors.New("slotlock: lock not held")
	// ErrLeaseLost is the cause a lease's context gets when any of its keys
	// is found lost; errors.Is(err, ErrNotHeld) holds for it too.
	ErrLeaseLost = fmt.Errorf("%w: lease lost", ErrNotHeld)
	// ErrInvalid: bad input or options (no keys, an empty key, too many
	// keys, a bad TTL, a nil client, options that cannot work together).
	// The message names the offender. Nothing was sent to Redis.
	ErrInvalid = errors.New("slotlock: invalid argument")
	// ErrUnsupported: a feature the Locker's strategy cannot give
	// (reentrancy, fencing tokens and guarded writes need scripts).
	ErrUnsupported = errors.New("slotlock: not supported by this strategy")
	// ErrClosed: use of a Locker after Close.
	ErrClosed = errors.New("slotlock: locker closed")
	// ErrRedis: an error reply of one node (a *NodeError names it).
	ErrRedis = rediserr.ErrRedis
	// ErrUnknownOutcome: a call whose reply never came (a *NodeError names
	// the node): the keys it carried were released owner-checked, or
	// expire by their TTL.
	ErrUnknownOutcome = rediserr.ErrUnknownOutcome
	// ErrStaleTopology: a call reached a node that no longer serves its
	// keys' slots and the retries did not settle it (a resharding or a
	// failover in progress). Nothing of that call was written.
	ErrStaleTopology = rediserr.ErrStaleTopology
	// ErrClientMode: the client is not a cluster client (rueidis
	// ForceSingleClient, a sentinel client) but its server is one master
	// of a Redis Cluster with several: most keys would be out of its
	// reach. The message names the node; use a cluster client.
	ErrClientMode = topology.ErrClientMode
	// ErrPermission: the server's ACL refused a command, key or channel
	// to the client's user; it comes with ErrRedis and a *NodeError
	// naming the node and the command (inside a script Redis 7.0 names
	// none: the message says which script). docs/acl.md lists the rules a
	// user needs.
	ErrPermission = rediserr.ErrPermission
	// ErrReplicas: fewer replicas than Options.MinReplicas acknowledged
	// the lock writes in time. The error is a *ReplicaError.
	ErrReplicas = protocol.ErrReplicas
)

// ConflictError lists the keys that stopped an acquisition and how long
// their holders' locks have left. errors.Is(err, ErrNotAcquired) holds.
type ConflictError struct {
	Conflicts []KeyConflict
}

// KeyConflict is one key held by another lease.
type KeyConflict struct {
	Key string
	// TTL is how long the other holder's lock has left, -1 if it has no
	// expiry (set by hand: slotlock never writes a lock without one) or,
	// for Local conflicts, if the holder is still acquiring.
	TTL time.Duration
	// Local is true when the holder is another lease of the same Locker,
	// found in the in-process queue without asking Redis.
	Local bool
}

func (e *ConflictError) Error() string {
	cs := make([]protocol.KeyConflict, len(e.Conflicts))
	for i, c := range e.Conflicts {
		cs[i] = protocol.KeyConflict(c)
	}
	return protocol.FormatConflicts(cs)
}

// Is makes errors.Is(err, ErrNotAcquired) true.
func (e *ConflictError) Is(target error) bool { return target == ErrNotAcquired }

// ReplicaError names the masters whose replicas did not acknowledge the
// lock writes within Options.ReplicaTimeout. errors.Is(err, ErrReplicas)
// holds.
type ReplicaError struct {
	Want       int // Options.MinReplicas
	Shortfalls []ReplicaShortfall
}

// ReplicaShortfall is one master whose replicas fell short.
type ReplicaShortfall struct {
	Node  string // the master's address
	Acked int    // how many replicas acknowledged
}

func (e *ReplicaError) Error() string {
	ss := make([]protocol.ReplicaShortfall, len(e.Shortfalls))
	for i, s := range e.Shortfalls {
		ss[i] = protocol.ReplicaShortfall(s)
	}
	return protocol.FormatReplicas(e.Want, ss)
}

// Is makes errors.Is(err, ErrReplicas) true.
func (e *ReplicaError) Is(target error) bool { return target == ErrReplicas }

// NodeError is the failure of one operation's commands on one node.
// errors.Is matches its Kind and its cause.
type NodeError struct {
	Node string // address of the master the commands were meant for
	Op   string // acquire, set, release, extend, guard or wait
	Keys int    // how many keys the failed commands carried
	// Kind is ErrRedis (an error reply), ErrUnknownOutcome (no reply) or
	// ErrStaleTopology (the node no longer serves the keys' slots).
	Kind error
	Err  error // the client's error
}

func (e *NodeError) Error() string {
	return (&protocol.NodeError{Node: e.Node, Op: e.Op, Keys: e.Keys, Err: e.Err}).Error()
}

// Unwrap lets errors.Is match the kind and the cause, and ErrPermission
// for a refusal of the server's ACL.
func (e *NodeError) Unwrap() []error {
	return (&protocol.NodeError{Node: e.Node, Op: e.Op, Keys: e.Keys, Kind: e.Kind, Err: e.Err}).Unwrap()
}

// LostError names the keys a lease found it no longer holds.
// errors.Is(err, ErrNotHeld) and errors.Is(err, ErrLeaseLost) hold.
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

// public rebuilds an error of the internal packages around the public
// types above: the one place where internal errors cross into the API.
func public(err error) error {
	switch e := err.(type) {
	case nil:
		return nil
	case *protocol.NodeError:
		return &NodeError{Node: e.Node, Op: e.Op, Keys: e.Keys, Kind: e.Kind, Err: e.Err}
	case *protocol.ConflictError:
		out := &ConflictError{Conflicts: make([]KeyConflict, len(e.Conflicts))}
		for i, c := range e.Conflicts {
			out.Conflicts[i] = KeyConflict(c)
		}
		return out
	case *protocol.ReplicaError:
		out := &ReplicaError{Want: e.Want, Shortfalls: make([]ReplicaShortfall, len(e.Shortfalls))}
		for i, s := range e.Shortfalls {
			out.Shortfalls[i] = ReplicaShortfall(s)
		}
		return out
	case *protocol.LimitError:
		return fmt.Errorf("%w: %s", ErrInvalid, strings.TrimPrefix(e.Error(), "slotlock: "))
	case *protocol.Wrapped:
		return fmt.Errorf("slotlock: %s: %w", e.Msg, public(e.Err))
	case interface{ Unwrap() []error }:
		errs := e.Unwrap()
		out := make([]error, len(errs))
		for i, x := range errs {
			out[i] = public(x)
		}
		return errors.Join(out...)
	}
	return err
}
