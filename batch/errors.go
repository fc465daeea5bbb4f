package batch

import (
	"errors"
	"fmt"
)

var (
	// ErrRedis wraps a reply or transport error of one node; the message
	// names the node and the script.
	ErrRedis = errors.New("batch: redis error")
	// ErrUnknownOutcome reports a call whose reply never came (connection
	// lost, deadline): the script may or may not have run.
	ErrUnknownOutcome = errors.New("batch: outcome unknown")
	// ErrStaleTopology reports a call that reached a node which no longer
	// serves some of its keys' slots. Nothing of that call was written.
	ErrStaleTopology = errors.New("batch: topology changed")
)

// NodeError is an error of one call to one node.
type NodeError struct {
	Node   string // address of the master the call was meant for
	Script string // acquire, release or extend
	Keys   int    // how many keys the call carried
	Kind   error  // ErrRedis, ErrUnknownOutcome or ErrStaleTopology
	Err    error  // what rueidis returned
}

func (e *NodeError) Error() string {
	return fmt.Sprintf("%s on node %s (%d keys): %v", e.Script, e.Node, e.Keys, e.Err)
}

// Unwrap lets errors.Is match both the kind and the cause.
func (e *NodeError) Unwrap() []error { return []error{e.Kind, e.Err} }
