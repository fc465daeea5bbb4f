package protocol

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/slotlock/slotlock/internal/rediserr"
	"github.com/slotlock/slotlock/internal/topology"
	"github.com/slotlock/slotlock/slot"
)

// The error types below are what the strategies and the protocol return;
// the root package turns each into its public twin (slotlock.NodeError and
// so on), whose fields go doc shows. Messages start with "slotlock:".

var (
	// ErrNotAcquired: keys held by someone else (a *ConflictError).
	ErrNotAcquired = errors.New("slotlock: not acquired")
	// ErrReplicas: fewer replicas than asked acknowledged the writes in
	// time (a *ReplicaError).
	ErrReplicas = errors.New("slotlock: too few replica acknowledgements")
	// ErrUnsettled: a call of the acquisition that can delete its keys or
	// give them away (a trim, a reserve round) got no reply. Its bytes may
	// still be read by the server after any later call under the same
	// token (a connection that rueidis closed on a deadline keeps its
	// unread bytes on the server, and the server may read the new
	// connection's first: docs/safety.md, "A call that runs after a later
	// one"), so no grant may follow under that token. Lock rolls back and
	// returns it; the caller starts again under a new token.
	ErrUnsettled = errors.New("slotlock: a call that can give keys away has an unknown outcome")
)

// UnknownOutcome reports whether err holds a node error whose commands may
// or may not have run.
func UnknownOutcome(err error) bool {
	return slices.ContainsFunc(leaves(err), func(e error) bool {
		if ne, ok := e.(*NodeError); ok {
			return ne.Kind == rediserr.ErrUnknownOutcome
		}
		u := errors.Unwrap(e) // Wrapped, or fmt.Errorf with one %w
		return u != nil && UnknownOutcome(u)
	})
}

// NodeError is the failure of one operation's commands on one node.
type NodeError struct {
	Node string // address of the master the commands were meant for
	Op   string // acquire, set, release, extend, guard or wait
	Keys int    // how many keys the failed commands carried
	Kind error  // rediserr.ErrRedis, ErrUnknownOutcome or ErrStaleTopology
	Err  error  // what rueidis returned
}

func (e *NodeError) Error() string {
	return fmt.Sprintf("slotlock: %s on node %s (%d keys): %v", e.Op, e.Node, e.Keys, e.Err)
}

// Unwrap lets errors.Is match the kind and the cause, and
// rediserr.ErrPermission for a refusal of the ACL.
func (e *NodeError) Unwrap() []error {
	if rediserr.Denied(e.Err) {
		return []error{e.Kind, e.Err, rediserr.ErrPermission}
	}
	return []error{e.Kind, e.Err}
}

// NewNodeError classifies err (rediserr.Kind) into a NodeError.
func NewNodeError(node, op string, keys int, err error) *NodeError {
	return &NodeError{Node: node, Op: op, Keys: keys, Kind: rediserr.Kind(err), Err: err}
}

// KeyConflict is one key held by another lease.
type KeyConflict struct {
	Key   string
	TTL   time.Duration
	Local bool
}

// ConflictError lists the keys that stopped an acquisition.
type ConflictError struct {
	Conflicts []KeyConflict
}

func (e *ConflictError) Error() string { return FormatConflicts(e.Conflicts) }

// Is makes errors.Is(err, ErrNotAcquired) true.
func (e *ConflictError) Is(target error) bool { return target == ErrNotAcquired }

// FormatConflicts is the message of a conflict error (shared with the
// public type).
func FormatConflicts(cs []KeyConflict) string {
	var b strings.Builder
	fmt.Fprintf(&b, "slotlock: not acquired: %d key(s) held by others:", len(cs))
	for i, c := range cs {
		if i == 8 {
			fmt.Fprintf(&b, " and %d more", len(cs)-i)
			break
		}
		switch {
		case c.Local && c.TTL < 0:
			fmt.Fprintf(&b, " %q (held in this process, acquiring)", c.Key)
		case c.Local:
			fmt.Fprintf(&b, " %q (held in this process, for %v)", c.Key, c.TTL)
		case c.TTL < 0:
			fmt.Fprintf(&b, " %q (no expiry)", c.Key)
		default:
			fmt.Fprintf(&b, " %q (for %v)", c.Key, c.TTL)
		}
	}
	return b.String()
}

// ReplicaShortfall is a node whose replicas did not acknowledge writes in
// time.
type ReplicaShortfall struct {
	Node  string
	Acked int
}

// ReplicaError names the masters whose replicas fell short.
type ReplicaError struct {
	Want       int
	Shortfalls []ReplicaShortfall
}

func (e *ReplicaError) Error() string { return FormatReplicas(e.Want, e.Shortfalls) }

// Is makes errors.Is(err, ErrReplicas) true.
func (e *ReplicaError) Is(target error) bool { return target == ErrReplicas }

// FormatReplicas is the message of a replica error (shared with the public
// type).
func FormatReplicas(want int, ss []ReplicaShortfall) string {
	var b strings.Builder
	fmt.Fprintf(&b, "slotlock: wanted %d replica acknowledgement(s):", want)
	for _, s := range ss {
		fmt.Fprintf(&b, " node %s got %d", s.Node, s.Acked)
	}
	return b.String()
}

// Wrapped adds context to an error that may hold NodeErrors, in a form the
// root package can rebuild around its public types (fmt.Errorf's wrapper
// cannot be rebuilt).
type Wrapped struct {
	Msg string
	Err error
}

func (e *Wrapped) Error() string { return "slotlock: " + e.Msg + ": " + e.Err.Error() }

func (e *Wrapped) Unwrap() error { return e.Err }

// Transient reports whether err is made only of failures that a new
// attempt can fix: stale-topology and unknown-outcome node errors, a slot
// without a master, an unreadable slot map (a failover or a reshard in
// progress).
func Transient(err error) bool {
	ls := leaves(err)
	return len(ls) > 0 && !slices.ContainsFunc(ls, func(e error) bool {
		if ne, ok := e.(*NodeError); ok {
			return ne.Kind != rediserr.ErrStaleTopology && ne.Kind != rediserr.ErrUnknownOutcome
		}
		return !errors.Is(e, slot.ErrUncovered) && !errors.Is(e, topology.ErrTopology)
	})
}

// leaves returns the errors err joins (errors.Join, fmt.Errorf with
// several %w), joins inside them flattened; err itself when it joins
// nothing or is a NodeError (whose Unwrap gives its kind and cause), and
// none for nil.
func leaves(err error) []error {
	if err == nil {
		return nil
	}
	j, ok := err.(interface{ Unwrap() []error })
	if _, node := err.(*NodeError); node || !ok {
		return []error{err}
	}
	var out []error
	for _, e := range j.Unwrap() {
		out = append(out, leaves(e)...)
	}
	return out
}

// LimitError: a permit asked for with a limit other than the one its live
// holders use. The attempt wrote nothing; waiting does not fix it.
type LimitError struct {
	Resource    string
	Held, Asked int64
}

func (e *LimitError) Error() string {
	return fmt.Sprintf("slotlock: permit %q: limit %d asked, but its holders use limit %d", e.Resource, e.Asked, e.Held)
}
