package clustertest

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/slotlock/slotlock"
	"github.com/slotlock/slotlock/internal/lockval"
	"github.com/slotlock/slotlock/slot"
)

// TestServerRunsAClosedConnectionsCallLate checks the premise of
// protocol.ErrUnsettled on the harness's Redis with the library's client:
// a call whose deadline passes while its node is paused gets an error from
// rueidis, which closes the connection; the node still runs the call when
// it resumes, and can run it after a call sent later on a new connection.
// So a call with an unknown outcome may take effect after any later call
// of the same acquisition, and an owner-checked release (a trim) sent
// before the attempt that re-took its keys may delete them under the
// granted lease (docs/safety.md, "A call that runs after a later one").
// The late order needs a call the server reads in several pieces (here
// about 50 KB, like a trim of 1,500 keys on one node); it is not certain
// on any one try (nor is it certain that the old call runs: a write cut
// by the deadline leaves the server a partial command, which it drops), so
// the test tries up to 40 times (about one try in four showed it here) and asserts the late order was seen.
func TestServerRunsAClosedConnectionsCallLate(t *testing.T) {
	e := newEnv(t, 2*time.Minute)
	key := e.prefix + "{late}order"
	victim := e.master(e.ctx, key)
	filler := make([]string, 1500)
	for i := range filler {
		filler[i] = strings.Repeat("x", 30) + strconv.Itoa(i)
	}
	late := 0
	for try := 1; try <= 40 && late == 0; try++ {
		c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{victim.Addr()}, ForceSingleClient: true, DisableCache: true})
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Do(e.ctx, c.B().Del().Key(key).Build()).Error(); err != nil {
			t.Fatal(err)
		}
		if err := victim.Pause(); err != nil {
			t.Fatal(err)
		}
		octx, cancel := context.WithTimeout(e.ctx, 300*time.Millisecond)
		err = c.Do(octx, c.B().Eval().Script("return redis.call('RPUSH', KEYS[1], ARGV[1])").Numkeys(1).Key(key).Arg(append([]string{"old"}, filler...)...).Build()).Error()
		cancel()
		if err == nil {
			t.Fatal("a call to a paused node answered")
		}
		resumed := make(chan error, 1)
		go func() {
			time.Sleep(200 * time.Millisecond) // the later call is on its way to the paused node
			resumed <- victim.Resume()
		}()
		nctx, ncancel := context.WithTimeout(e.ctx, 5*time.Second)
		err = c.Do(nctx, c.B().Rpush().Key(key).Element("new").Build()).Error()
		ncancel()
		if rerr := <-resumed; rerr != nil {
			t.Fatal(rerr)
		}
		if err != nil {
			t.Fatal(err)
		}
		// The old call runs when the node reads it, or never (its bytes
		// were cut by the close): a second is plenty for the first.
		var order []string
		for wait := time.Now().Add(time.Second); !slices.Contains(order, "old") && time.Now().Before(wait); {
			if order, err = c.Do(e.ctx, c.B().Lrange().Key(key).Start(0).Stop(-1).Build()).AsStrSlice(); err != nil {
				t.Fatal(err)
			}
		}
		t.Logf("try %d: %v", try, order)
		if slices.Equal(order, []string{"new", "old"}) {
			late = try
		}
		c.Close()
	}
	if late == 0 {
		t.Fatal("in 40 tries the server never ran a closed connection's call after a later one: docs/safety.md and protocol.ErrUnsettled say it can")
	}
}

// TestUnsettledReserveGoesOnUnderANewToken: a waiter by reservation whose
// Reserve got no reply (its node paused past the client's
// ConnWriteTimeout, which closes the connection) must not be granted
// under the token that call carries: run late, after a confirm of the same
// token granted, it would treat the granted key as its own and could hand
// it to an older waiter. The waiter leaves and goes on under a new token
// (protocol.ErrUnsettled), and is granted under that one. Mutation: the
// Reserve's unknown outcome treated as any transient failure (as before):
// granted under the token that stood in the queue.
func TestUnsettledReserveGoesOnUnderANewToken(t *testing.T) {
	e := newEnv(t, time.Minute)
	const key = "unsettled:1"
	opt := slotlock.Options{TTL: 30 * time.Second}
	holder := e.locker(e.client(), opt)
	short, err := e.c.Client(func(o *rueidis.ClientOption) { o.ConnWriteTimeout = 200 * time.Millisecond })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(short.Close)
	waiter := e.locker(short, opt)
	h, err := holder.Lock(e.ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		le  *slotlock.Lease
		err error
	}
	got := make(chan result, 1)
	go func() {
		le, err := waiter.Lock(e.ctx, key)
		got <- result{le, err}
	}()
	// The waiter's token, as its queue entry names it.
	q := e.names.QueueKeyInSlot(key, slot.KeySlot(key))
	victim := e.master(e.ctx, key)
	var first string
	for first == "" {
		members, err := victim.Do(e.ctx, "ZRANGE", q, "0", "-1").AsStrSlice()
		if err != nil {
			t.Fatal(err)
		}
		if len(members) > 0 {
			first = lockval.QueueEntry(members[0]).Token
		}
		if e.ctx.Err() != nil {
			t.Fatal("the waiter never stood in the queue")
		}
	}
	// Paused for longer than the waiter's refresh (QueuedRefresh, 400 ms)
	// plus what rueidis gives a connection that carries a subscription
	// (the waiter's inbox) before it closes it: a PING after a second
	// without replies (Dialer.KeepAlive), answered within ConnWriteTimeout
	// (200 ms here, 10 s by default). A Reserve goes out and its
	// connection is closed before any reply.
	if err := victim.Pause(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second)
	if err := victim.Resume(); err != nil {
		t.Fatal(err)
	}
	if err := h.Release(e.ctx); err != nil {
		t.Fatal(err)
	}
	r := <-got
	if r.err != nil {
		t.Fatal(r.err)
	}
	defer func() { _ = r.le.Release(context.Background()) }()
	if lockval.Short(r.le.Token()) == lockval.Short(first) {
		t.Fatalf("granted under the token %s whose Reserve had no reply", lockval.Short(first))
	}
}
