package tracking_test

import (
	"context"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/slotlock/slotlock/internal/protocol"
	"github.com/slotlock/slotlock/internal/redistest"
	"github.com/slotlock/slotlock/internal/topology"
	"github.com/slotlock/slotlock/internal/tracking"
	"github.com/slotlock/slotlock/slot"
)

// owner records what the Tracker says of one watch.
type owner struct {
	deadline time.Time
	once     sync.Once
	lost     chan []int
	expired  chan struct{}
}

func newOwner(ttl time.Duration) *owner {
	return &owner{deadline: time.Now().Add(ttl), lost: make(chan []int, 1), expired: make(chan struct{})}
}

func (o *owner) Deadline() time.Time { return o.deadline }
func (o *owner) Lost(idx []int)      { o.lost <- idx }
func (o *owner) Expired()            { o.once.Do(func() { close(o.expired) }) }

// held writes a lock key for key that a watch with holder holds, and
// returns the watch.
func held(t *testing.T, ctx context.Context, admin rueidis.Client, key, holder string, o *owner) *tracking.Watch {
	t.Helper()
	names, err := slot.NewNamer("trk" + strconv.FormatInt(time.Now().UnixNano(), 36))
	require.NoError(t, err)
	set := protocol.NewSet(names, []string{key})
	require.NoError(t, admin.Do(ctx, admin.B().Set().Key(set.Lock[0]).Value(holder+".1").Px(time.Minute).Build()).Error())
	return &tracking.Watch{Set: set, Holder: holder, Owner: o}
}

// trackerEnv returns the package's cluster, a context bounded for the
// test, and a client that writes lock keys as a lease would.
func trackerEnv(t *testing.T) (*redistest.Cluster, context.Context, rueidis.Client) {
	t.Helper()
	c := redistest.Require(t, cluster)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	admin, err := c.Client()
	require.NoError(t, err)
	t.Cleanup(admin.Close)
	return c, ctx, admin
}

func TestTrackerRefusedByACL(t *testing.T) {
	// A user that may not run CLIENT: tracking is refused for good (no
	// reconnect loop), and the deadline still ends the watch.
	c, ctx, admin := trackerEnv(t)
	user := "notrack" + strconv.FormatInt(time.Now().UnixNano(), 36)
	for _, n := range c.Nodes() {
		require.NoError(t, n.Do(ctx, "ACL", "SETUSER", user, "on", ">pw", "~*", "&*", "+@all", "-client").Error())
	}
	t.Cleanup(func() {
		for _, n := range c.Nodes() {
			_ = n.Do(context.Background(), "ACL", "DELUSER", user).Error()
		}
	})
	client, err := c.Client(func(o *rueidis.ClientOption) { o.Username, o.Password, o.DisableCache = user, "pw", true })
	require.NoError(t, err)
	defer client.Close()
	tr := tracking.New(client, topology.New(client))
	defer tr.Close()

	o := newOwner(400 * time.Millisecond)
	tr.Watch(held(t, ctx, admin, "refused", "tokenA", o))
	require.Eventually(t, tr.Refused, 10*time.Second, time.Millisecond, "NOPERM for CLIENT is a refusal")
	select {
	case <-o.expired:
	case idx := <-o.lost:
		t.Fatalf("lost %v reported without tracking", idx)
	case <-ctx.Done():
		t.Fatal("the deadline did not end the watch")
	}
}

func TestTrackerBusyIsNotARefusal(t *testing.T) {
	// A node busy with a long script answers BUSY to CLIENT TRACKING: a
	// passing state. The Tracker must try again and register the key
	// once the script ends (it once gave up tracking for good on any
	// error reply but LOADING, CLUSTERDOWN, TRYAGAIN, MOVED and ASK).
	c, ctx, admin := trackerEnv(t)
	const key = "busy"
	node, err := c.NodeForSlot(ctx, slot.KeySlot(key))
	require.NoError(t, err)
	old, err := node.Do(ctx, "CONFIG", "GET", "busy-reply-threshold").AsStrMap()
	require.NoError(t, err)
	require.NotEmpty(t, old["busy-reply-threshold"])
	require.NoError(t, node.Do(ctx, "CONFIG", "SET", "busy-reply-threshold", "10").Error())
	t.Cleanup(func() {
		_ = node.Do(context.Background(), "SCRIPT", "KILL").Error()
		_ = node.Do(context.Background(), "CONFIG", "SET", "busy-reply-threshold", old["busy-reply-threshold"]).Error()
	})

	o := newOwner(time.Minute)
	w := held(t, ctx, admin, key, "tokenB", o)
	// Made before the node is busy (its slot map read would meet the
	// BUSY), and without rueidis's own cache, whose handshake would meet
	// it first: the Tracker's CLIENT TRACKING must.
	client, err := c.Client(func(o *rueidis.ClientOption) { o.DisableCache = true })
	require.NoError(t, err)
	defer client.Close()
	tr := tracking.New(client, topology.New(client))
	defer tr.Close()

	// The script spins for 1.5 s of server time on the key's master.
	spin := `local s = redis.call('TIME') repeat local n = redis.call('TIME') until (n[1] - s[1]) * 1000000 + (n[2] - s[2]) > 1500000 return 1`
	// On a connection of its own: Node.Do's would queue the PINGs behind it.
	spinner, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{node.Addr()}, ForceSingleClient: true, DisableCache: true})
	require.NoError(t, err)
	defer spinner.Close()
	done := make(chan error, 1)
	go func() {
		done <- spinner.Do(context.Background(), spinner.B().Eval().Script(spin).Numkeys(0).Build()).Error()
	}()
	require.Eventually(t, func() bool {
		err := node.Do(ctx, "PING").Error()
		return err != nil && strings.HasPrefix(err.Error(), "BUSY")
	}, 5*time.Second, time.Millisecond, "the node answers BUSY")

	tr.Watch(w)
	require.NoError(t, <-done, "the script ran to its end")

	require.Eventually(t, func() bool { return tr.Stats().Held >= 1 }, 10*time.Second, time.Millisecond,
		"the key is registered after the script (refused: %v)", tr.Refused())
	require.False(t, tr.Refused())
	require.NoError(t, admin.Do(ctx, admin.B().Del().Key(w.Set.Lock[0]).Build()).Error())
	select {
	case idx := <-o.lost:
		require.Equal(t, []int{0}, idx)
	case <-ctx.Done():
		t.Fatal("the deletion was not seen")
	}
}

// TestShortLeasesDoNotWakeTheLoop: leases released right after they are
// granted, one after the other, as a single worker's, do not wake the
// Tracker's deadline loop each (they did when the loop, finding nothing
// queued, set its timer an hour ahead: every new deadline then came
// before it), and a deadline sooner than the loop's timer still ends its
// watch on time.
func TestShortLeasesDoNotWakeTheLoop(t *testing.T) {
	c, ctx, admin := trackerEnv(t)
	client, err := c.Client()
	require.NoError(t, err)
	defer client.Close()
	tr := tracking.New(client, topology.New(client))
	defer tr.Close()
	names, err := slot.NewNamer("trkwake")
	require.NoError(t, err)
	set := protocol.NewSet(names, []string{"k"})

	const leases = 200
	for range leases {
		w := &tracking.Watch{Set: set, Holder: "tokenW", Owner: newOwner(30 * time.Second)}
		before := tr.Stats().Wakes
		tr.Watch(w)
		tr.Forget(w)
		// Give a wake-up the time to happen: the loop finds the heap empty
		// again, as after a real single-key release.
		deadline := time.Now().Add(2 * time.Millisecond)
		for tr.Stats().Wakes == before && time.Now().Before(deadline) {
			runtime.Gosched()
		}
	}
	require.LessOrEqual(t, tr.Stats().Wakes, int64(5), "wake-ups of the deadline loop for %d leases", leases)

	// A watch due long before the loop's timer (now half of 30 s ahead),
	// of a key that is held (the tracker reads it).
	o := newOwner(300 * time.Millisecond)
	tr.Watch(held(t, ctx, admin, "short", "tokenS", o))
	select {
	case <-o.expired:
		require.Less(t, time.Since(o.deadline), time.Second, "expired late")
	case idx := <-o.lost:
		t.Fatalf("lost %v: the key is held", idx)
	case <-ctx.Done():
		t.Fatal("a deadline before the loop's timer did not end its watch")
	}
}

// TestAReservationIsALoss: a lease holds its keys from its grant, so a
// key found reserved for the watch's holder (a call of its acquisition
// run late: a lost reply) is a loss, like any other value: its expiry is
// a reservation's, short of the lease's deadline. Mutation checked: settle
// taking a reservation that names the holder as held (no loss reported).
func TestAReservationIsALoss(t *testing.T) {
	c, ctx, admin := trackerEnv(t)
	client, err := c.Client()
	require.NoError(t, err)
	defer client.Close()
	tr := tracking.New(client, topology.New(client))
	defer tr.Close()
	names, err := slot.NewNamer("trkres")
	require.NoError(t, err)
	set := protocol.NewSet(names, []string{"rk"})
	require.NoError(t, admin.Do(ctx, admin.B().Set().Key(set.Lock[0]).Value("^1000:tokR/5:P{x}#in:id!").Px(time.Minute).Build()).Error())
	o := newOwner(time.Minute)
	tr.Watch(&tracking.Watch{Set: set, Holder: "tokR", Owner: o})
	select {
	case idx := <-o.lost:
		require.Equal(t, []int{0}, idx)
	case <-time.After(10 * time.Second):
		t.Fatal("a key reserved for the holder was not seen as a loss")
	}
}
