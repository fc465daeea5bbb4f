package pipeline

import (
	"errors"
	"slices"
	"strings"
	"sync"

	"github.com/slotlock/slotlock/internal/protocol"
	"github.com/slotlock/slotlock/internal/rediserr"
)

// nodeErrors collects one protocol.NodeError per node and kind for one
// operation, counting the keys each covers, so that a failure of a whole
// node reads as one error naming it rather than one per key.
type nodeErrors struct {
	op string // "set", "release" or "extend"

	mu  sync.Mutex
	all []*protocol.NodeError
}

// add records that the command for one key on node failed with err and
// returns the NodeError that now stands for it.
func (n *nodeErrors) add(node string, err error) *protocol.NodeError {
	kind := rediserr.Kind(err)
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, ne := range n.all {
		if ne.Node == node && ne.Kind == kind {
			ne.Keys++
			return ne
		}
	}
	ne := &protocol.NodeError{Node: node, Op: n.op, Keys: 1, Kind: kind, Err: err}
	n.all = append(n.all, ne)
	return ne
}

// stale reports whether any recorded error says the slot map is stale.
func (n *nodeErrors) stale() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, ne := range n.all {
		if ne.Kind == rediserr.ErrStaleTopology {
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
	slices.SortFunc(all, func(a, b *protocol.NodeError) int { return strings.Compare(a.Node, b.Node) })
	errs := make([]error, len(all))
	for i, ne := range all {
		errs[i] = ne
	}
	return errors.Join(errs...)
}
