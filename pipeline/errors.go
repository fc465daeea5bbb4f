package pipeline

import (
	"errors"
	"slices"
	"strings"
	"sync"

	"github.com/redis/rueidis"

	"github.com/slotlock/slotlock/batch"
	"github.com/slotlock/slotlock/internal/topology"
)

// kindOf sorts the error of one command into the kinds batch.NodeError
// knows: no reply (the command may or may not have run), a slot that lives
// elsewhere now (the command did not run), or any other error reply.
func kindOf(err error) error {
	if _, ok := rueidis.IsRedisErr(err); !ok {
		return batch.ErrUnknownOutcome
	}
	if topology.IsStale(err) {
		return batch.ErrStaleTopology
	}
	return batch.ErrRedis
}

// nodeErrors collects one batch.NodeError per node and kind for one
// operation, counting the keys each covers, so that a failure of a whole
// node reads as one error naming it rather than one per key.
type nodeErrors struct {
	op string // "set", "release" or "extend"

	mu  sync.Mutex
	all []*batch.NodeError
}

// add records that the command for one key on node failed with err and
// returns the NodeError that now stands for it.
func (n *nodeErrors) add(node string, err error) *batch.NodeError {
	kind := kindOf(err)
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, ne := range n.all {
		if ne.Node == node && ne.Kind == kind {
			ne.Keys++
			return ne
		}
	}
	ne := &batch.NodeError{Node: node, Script: n.op, Keys: 1, Kind: kind, Err: err}
	n.all = append(n.all, ne)
	return ne
}

// stale reports whether any recorded error says the slot map is stale.
func (n *nodeErrors) stale() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, ne := range n.all {
		if ne.Kind == batch.ErrStaleTopology {
			return true
		}
	}
	return false
}

// join returns the recorded errors ordered by node, or nil.
func (n *nodeErrors) join() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if len(n.all) == 0 {
		return nil
	}
	all := slices.Clone(n.all)
	slices.SortFunc(all, func(a, b *batch.NodeError) int { return strings.Compare(a.Node, b.Node) })
	errs := make([]error, len(all))
	for i, ne := range all {
		errs[i] = ne
	}
	return errors.Join(errs...)
}

// transient is batch.Transient: failures a new attempt can fix.
func transient(err error) bool { return batch.Transient(err) }
