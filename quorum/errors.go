package quorum

import (
	"errors"
	"fmt"
	"strings"

	"github.com/slotlock/slotlock"
)

// ErrNoQuorum: fewer than a majority of the deployments did what was asked
// (granted the batch within the validity window, released it, extended it).
// The error is a *QuorumError naming each deployment that failed and why.
var ErrNoQuorum = errors.New("slotlock/quorum: no majority")

// QuorumError is an operation that a majority of the deployments did not
// complete. errors.Is(err, ErrNoQuorum) holds, and errors.Is / errors.As
// reach every deployment's own error (a *slotlock.ConflictError when keys
// were held by others, a *slotlock.NodeError for an unreachable node, a
// context error for a deployment that did not answer in time).
type QuorumError struct {
	Op     string // lock, release or extend
	Need   int    // the majority: len(deployments)/2 + 1
	Done   int    // how many deployments completed the operation
	Failed []*DeploymentError
	// Expired is set when a majority granted, but too late: the validity
	// window (TTL minus elapsed time minus the clock-drift allowance) had
	// passed by the time they answered.
	Expired bool
}

func (e *QuorumError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "slotlock/quorum: %s: %d of %d deployments, %d needed", e.Op, e.Done, e.Done+len(e.Failed), e.Need)
	if e.Expired {
		b.WriteString(", and the validity window had passed when they answered")
	}
	for _, f := range e.Failed {
		fmt.Fprintf(&b, "; %v", f)
	}
	return b.String()
}

// Is makes errors.Is(err, ErrNoQuorum) true.
func (e *QuorumError) Is(target error) bool { return target == ErrNoQuorum }

// Unwrap gives errors.Is and errors.As every deployment's error.
func (e *QuorumError) Unwrap() []error {
	out := make([]error, len(e.Failed))
	for i, f := range e.Failed {
		out[i] = f
	}
	return out
}

// DeploymentError is the error one deployment returned within a quorum
// operation.
type DeploymentError struct {
	Deployment int    // index into the clients given to New
	Name       string // the deployment's address (its first node's, sorted)
	Err        error
}

func (e *DeploymentError) Error() string {
	return fmt.Sprintf("deployment %d (%s): %v", e.Deployment, e.Name, e.Err)
}

func (e *DeploymentError) Unwrap() error { return e.Err }

// LostError is the cause a lease ends with when it no longer holds its
// keys on a majority of the deployments: some lost them (expired, deleted,
// a deployment restarted empty), or the validity window passed without a
// majority renewing in time. errors.Is(err, slotlock.ErrLeaseLost) and
// errors.Is(err, slotlock.ErrNotHeld) hold.
type LostError struct {
	Held, Need int
	// Expired: the validity window passed (renewals did not reach a
	// majority in time), rather than deployments reporting the keys lost.
	Expired bool
	// Lost lists the deployments whose own lease ended, with its cause
	// (a *slotlock.LostError naming the keys).
	Lost []*DeploymentError
}

func (e *LostError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "slotlock/quorum: lease lost: held on %d deployments, %d needed", e.Held, e.Need)
	if e.Expired {
		b.WriteString(" (the validity window passed without a majority renewal)")
	}
	for _, f := range e.Lost {
		fmt.Fprintf(&b, "; %v", f)
	}
	return b.String()
}

// Is makes errors.Is(err, slotlock.ErrLeaseLost) and
// errors.Is(err, slotlock.ErrNotHeld) true.
func (e *LostError) Is(target error) bool {
	return target == slotlock.ErrLeaseLost || target == slotlock.ErrNotHeld
}
