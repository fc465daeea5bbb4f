package rediserr

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/redis/rueidis"
)

// rueidis builds error replies only from the wire, so the kinds of real
// replies are checked against the live cluster (topology.TestIsStale,
// with a real MOVED); here, what is not a reply is a lost one.
func TestKind(t *testing.T) {
	cases := []struct {
		name string
		err  error
		want error
	}{
		{"lost", context.DeadlineExceeded, ErrUnknownOutcome},
		{"wrapped lost", fmt.Errorf("dial: %w", errors.New("refused")), ErrUnknownOutcome},
	}
	for _, c := range cases {
		if got := Kind(c.err); got != c.want {
			t.Errorf("%s: Kind = %v, want %v", c.name, got, c.want)
		}
	}
	if Lost(nil) || Lost(rueidis.Nil) || !Lost(context.Canceled) {
		t.Error("Lost: nil and the nil reply are replies; a cancelled call is lost")
	}
	// A wrapped reply is still a reply (a wrapped error reply is checked
	// against the server in tracking.TestTrackerRefusedByACL).
	wrapped := fmt.Errorf("get: %w", rueidis.Nil)
	if !IsNil(wrapped) || Lost(wrapped) || IsErrorReply(wrapped) {
		t.Error("a wrapped nil reply: IsNil, not lost, not an error reply")
	}
}
