package batch

import (
	"context"
	"slices"
	"strconv"

	"github.com/redis/rueidis"

	"github.com/slotlock/slotlock/internal/protocol"
	"github.com/slotlock/slotlock/internal/rediserr"
)

// BareMax is the largest batch that takeBare takes. A bare
// SET costs the client a command of its own to build, send and read back,
// where the script takes all of a node's keys in one call; the script
// costs its master about a microsecond more per key. Above this bound the
// client's extra CPU grew to 0.4-0.8 ms per 1,000-key batch for no gain in
// batches/s on this project's 2-core machine (docs/design.md, "A small
// plain batch tries bare SETs first").
const BareMax = 256

// bareFits reports whether an attempt over n keys may use takeBare: a
// plain lease (no fencing token to draw, no hold set to join, no replicas
// to wait for) of at most BareMax keys, on a deployment where an acquire
// script has already run (a server that refuses scripts must say so at
// the lock, where an Auto Locker switches strategy having written
// nothing, not at the release of keys a bare SET took). A waiter's later
// attempts are never bare: it may be in line for its keys, and only the
// script takes a key handed to it and leaves its queues (acquire.lua,
// mode 'v'). Otherwise one key is tried on every attempt: it cannot be
// half taken. More are tried on the first attempt only, and only while
// nearly every recent acquisition found its keys free (contention.go).
func (e *Engine) bareFits(n int, r *protocol.Request, opt protocol.AttemptOptions) bool {
	if n < 1 || n > BareMax || r.Who.Lease != "" || r.Fencing || r.MinReplicas > 0 || !e.scriptsRun.Load() || opt.Mode == protocol.Confirm {
		return false
	}
	if !opt.First && opt.Mode == protocol.Prefix {
		return false
	}
	if n == 1 {
		return true
	}
	if !opt.First {
		return false
	}
	// Where batches collide in Redis, a bare attempt that fails costs a
	// round trip more than the script alone, and its partial holds get in
	// others' way until the script's answer trims them.
	return e.contention.rate() < bareBelow
}

// takeBare takes keys from.. of set with SET key token NX PX ttl, bare
// commands through the cluster client, as the key's own client would send
// them, instead of a script call, which costs its master about a
// microsecond more per key (docs/benchmarks.md). One key goes in one Do;
// more in one DoMulti, which sends each node its share in parallel. The
// cluster client follows MOVED and ASK per command: safe for a one-key
// command (a source node answers ASK only for a key it does not have).
//
// It writes the outcome into st: Held for an OK, NotHeld for a key found
// held (a nil reply) or a Redis error (nothing written), Unknown for a
// lost reply (the SET may have landed; the node is marked troubled). It
// reports whether every key was taken, and whether it sent anything at
// all: not when the slot map is unreadable, a slot has no master, or one
// of the masters failed a call lately (the cluster client may then wait
// for a redial beyond ctx, and the general path's calls do not; see
// exec).
//
// Unlike the script, the bare commands are not all or nothing: on a held
// key the others stay taken. Attempt then runs the script on the keys not
// taken, which decides for them as if from the start (a key holding the
// lease's own token counts as taken, so a SET that landed although its
// reply was lost is found there), and keeps what the bare commands took
// in State: the protocol's Lock gives back what lies above the first key it
// could not get, TryLock gives back everything, as after any partial attempt. Other
// batches may see those keys held for that round trip, no longer.
func (e *Engine) takeBare(ctx context.Context, set *protocol.Set, from int, r *protocol.Request, st []protocol.KeyState) (taken, tried bool) {
	who, ttl := r.Who, r.TTL
	m, err := e.topo.Current(ctx)
	if err != nil {
		return false, false
	}
	var seenBuf [8]int
	seen := seenBuf[:0] // masters already checked
	for i := from; i < set.Len(); i++ {
		o := m.Owner(set.Keys[i].Slot)
		if o < 0 {
			return false, false
		}
		if !slices.Contains(seen, o) {
			if e.isTroubled(m.Addrs[o]) {
				return false, false
			}
			seen = append(seen, o)
		}
	}
	// Arbitrary with the TTL formatted once: see BenchmarkBareSetBuild.
	px := strconv.FormatInt(ttl.Milliseconds(), 10)
	set1 := func(i int) rueidis.Completed {
		return e.client.B().Arbitrary("SET").Keys(set.Lock[i]).Args(who.Holder, "NX", "PX", px).Build()
	}
	taken = true
	note := func(i int, res rueidis.RedisResult) {
		switch {
		case res.Error() == nil:
			st[i] = protocol.Held
		case rediserr.Lost(res.Error()):
			st[i] = protocol.Unknown
			e.trouble(m.Addrs[m.Owner(set.Keys[i].Slot)])
			taken = false
		default: // nil (held) or an error reply: nothing written
			taken = false
		}
	}
	if set.Len()-from == 1 {
		note(from, e.client.Do(ctx, set1(from)))
		return taken, true
	}
	cmds := make(rueidis.Commands, 0, set.Len()-from)
	for i := from; i < set.Len(); i++ {
		cmds = append(cmds, set1(i))
	}
	for k, r := range e.client.DoMulti(ctx, cmds...) {
		note(from+k, r)
	}
	return taken, true
}

// oneKeyNode returns the master of key i for a one-key command through the
// cluster client (releaseOne), and false when the slot map is
// unreadable, the slot has no master, or the master failed a call lately:
// the general path then runs, whose calls to such a node do not block the
// caller beyond ctx (see exec).
func (e *Engine) oneKeyNode(ctx context.Context, set *protocol.Set, i int) (string, bool) {
	m, err := e.topo.Current(ctx)
	if err != nil {
		return "", false
	}
	o := m.Owner(set.Keys[i].Slot)
	if o < 0 || e.isTroubled(m.Addrs[o]) {
		return "", false
	}
	return m.Addrs[o], true
}

// oneKeyErr marks node troubled when err is not a Redis reply (a lost
// reply, a broken connection), as exec does, and returns err. A nil reply
// is a reply: rueidis.IsRedisErr says false for it.
func (e *Engine) oneKeyErr(node string, err error) error {
	if rediserr.Lost(err) {
		e.trouble(node)
	}
	return err
}
