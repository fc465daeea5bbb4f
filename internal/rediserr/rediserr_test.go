package rediserr

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/redis/rueidis"
)

// rueidis builds error replies only from the wire, so the kinds of real
// replies are checked against the live cluster (TestErrorKindsOnTheServer
// in the root package); here, what is not a reply is a lost one.
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
}

func TestStaleTexts(t *testing.T) {
	for _, msg := range []string{
		"ERR Script attempted to access a non local key in a cluster node script",
		"CROSSSLOT Keys in request don't hash to the same slot",
		"TRYAGAIN Multiple keys request during rehashing of slot",
		"MOVED 3999 127.0.0.1:6381",
		"ASK 3999 127.0.0.1:6381",
		"CLUSTERDOWN The cluster is down",
	} {
		if !IsStale(errors.New(msg)) {
			t.Errorf("IsStale(%q) = false", msg)
		}
	}
	for _, msg := range []string{"WRONGTYPE Operation against a key holding the wrong kind of value", "NOPERM no permission"} {
		if IsStale(errors.New(msg)) {
			t.Errorf("IsStale(%q) = true", msg)
		}
	}
}
