package protocol

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/slotlock/slotlock/internal/rediserr"
	"github.com/slotlock/slotlock/slot"
)

func TestTransient(t *testing.T) {
	stale := &NodeError{Node: "a", Kind: rediserr.ErrStaleTopology, Err: errors.New("MOVED")}
	lost := &NodeError{Node: "b", Kind: rediserr.ErrUnknownOutcome, Err: context.DeadlineExceeded}
	hard := &NodeError{Node: "c", Kind: rediserr.ErrRedis, Err: errors.New("NOPERM")}
	for _, c := range []struct {
		err  error
		want bool
	}{
		{errors.Join(stale, lost), true},
		{fmt.Errorf("%w: key", slot.ErrUncovered), true},
		{errors.Join(stale, hard), false},
		{nil, false},
	} {
		if got := Transient(c.err); got != c.want {
			t.Errorf("Transient(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

func TestUnknownOutcome(t *testing.T) {
	stale := &NodeError{Node: "a", Kind: rediserr.ErrStaleTopology, Err: errors.New("MOVED")}
	lost := &NodeError{Node: "b", Kind: rediserr.ErrUnknownOutcome, Err: context.DeadlineExceeded}
	for _, c := range []struct {
		err  error
		want bool
	}{
		{errors.Join(stale, lost), true},
		{fmt.Errorf("%w: %w", ErrUnsettled, lost), true},
		{&Wrapped{Msg: "rollback", Err: errors.Join(stale, lost)}, true},
		{stale, false},
		{context.DeadlineExceeded, false}, // the context's, not a call's
		{nil, false},
	} {
		if got := UnknownOutcome(c.err); got != c.want {
			t.Errorf("UnknownOutcome(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}
