package pipeline

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/rueidis"

	"github.com/slotlock/slotlock/internal/lockval"
	"github.com/slotlock/slotlock/internal/protocol"
	"github.com/slotlock/slotlock/internal/rediserr"
	"github.com/slotlock/slotlock/slot"
)

// Attempt sends SET lockKey token NX PX ttl for every key from `from` on,
// in one DoMulti (protocol.Strategy; the mode does not matter: SET NX takes
// every free key, and the protocol trims or rolls back): rueidis groups the commands by the master of their slot and
// sends each group as one pipeline, all masters in parallel. With
// MinReplicas each master's group ends with a WAIT on the same connection.
//
// A SET that did not take is then read back (GET and PTTL, one more round
// trip, only for those keys): the value tells whether an earlier attempt of
// ours already holds the key (its reply was lost) or who else does, and for
// how long.
func (e *Engine) Attempt(ctx context.Context, set *protocol.Set, from int, r *protocol.Request, _ protocol.AttemptOptions) protocol.Attempt {
	n := set.Len()
	a := protocol.Attempt{State: make([]protocol.KeyState, n)}
	gen := e.topo.Generation()
	m, err := e.topo.Current(ctx)
	if err != nil {
		a.Err = err
		return a
	}
	owner := make([]int, n)
	for i := from; i < n; i++ {
		o := m.Owner(set.Keys[i].Slot)
		if o < 0 {
			// A slot without a master: the map predates a failover.
			_, _ = e.topo.Refresh(ctx, gen)
			a.Err = fmt.Errorf("%w: key %q", slot.ErrUncovered, set.Keys[i].Name)
			return a
		}
		owner[i] = o
	}

	token, ms := r.Who.Holder, r.TTL.Milliseconds()
	b := e.client.B()
	cmds := make(rueidis.Commands, 0, n-from+len(m.Addrs))
	for i := from; i < n; i++ {
		cmds = append(cmds, b.Set().Key(set.Lock[i]).Value(token).Nx().PxMilliseconds(ms).Build())
	}
	var waitNodes []int
	if r.MinReplicas > 0 {
		// WAIT only counts the writes of its own connection: rueidis sends
		// all of one node's commands of a DoMulti on one connection (a
		// dedicated one, since WAIT blocks), in order. Pin each WAIT to
		// the slot of the node's last key.
		last := make([]int, len(m.Addrs))
		for o := range last {
			last[o] = -1
		}
		for i := from; i < n; i++ {
			last[owner[i]] = i
		}
		for o, i := range last {
			if i < 0 {
				continue
			}
			cmds = append(cmds, b.Wait().Numreplicas(int64(r.MinReplicas)).
				Timeout(r.ReplicaTimeout.Milliseconds()).Build().SetSlot(set.Lock[i]))
			waitNodes = append(waitNodes, o)
		}
		a.Node = make([]string, n)
		for i := from; i < n; i++ {
			a.Node[i] = m.Addrs[owner[i]]
		}
	}
	res := e.client.DoMulti(ctx, cmds...)

	errs := &nodeErrors{op: "set"}
	granted := make([]bool, len(m.Addrs))
	var check []int // keys whose SET did not take: held by someone
	for i := from; i < n; i++ {
		err := res[i-from].Error()
		switch {
		case err == nil:
			a.State[i] = protocol.Held
			granted[owner[i]] = true
		case rediserr.IsNil(err):
			check = append(check, i)
		default:
			ne := errs.add(m.Addrs[owner[i]], err)
			if ne.Kind == rediserr.ErrUnknownOutcome {
				a.State[i] = protocol.Unknown // the SET may have run
			}
		}
	}
	for k, o := range waitNodes {
		if !granted[o] {
			continue
		}
		got, err := res[n-from+k].AsInt64()
		if err != nil {
			errs.add(m.Addrs[o], fmt.Errorf("WAIT: %w", err))
		}
		if acked, short := protocol.Acked(got, err, r.MinReplicas); short {
			if a.Short == nil {
				a.Short = map[string]int{}
			}
			a.Short[m.Addrs[o]] = acked
		}
	}

	if len(check) > 0 {
		cmds = cmds[:0]
		for _, i := range check {
			cmds = append(cmds, b.Get().Key(set.Lock[i]).Build(), b.Pttl().Key(set.Lock[i]).Build())
		}
		res = e.client.DoMulti(ctx, cmds...)
		for k, i := range check {
			v, err := res[2*k].ToString()
			switch {
			case err == nil && lockval.OfPlain(v, token):
				// Taken by an earlier attempt of this acquisition (whose
				// reply was lost, or the kept prefix): ours, with the
				// expiry of that attempt.
				a.State[i] = protocol.Kept
				continue
			case rediserr.Lost(err):
				// The key is held (SET NX said so) but we could not read by
				// whom; maybe by us, after a lost reply.
				errs.add(m.Addrs[owner[i]], fmt.Errorf("GET: %w", err))
				continue
			}
			// Someone else's: a value of theirs, gone since the SET (TTL
			// 0: try again at once), or not a string at all.
			_, reserved := lockval.ReservedFor(v)
			a.Conflicts = append(a.Conflicts, protocol.Conflict{Index: i, TTL: conflictTTL(res[2*k+1]), Reserved: reserved})
		}
	}
	if errs.stale() {
		_, _ = e.topo.Refresh(ctx, gen)
	}
	a.Err = errs.join()
	return a
}

// conflictTTL turns a PTTL reply into a Conflict's TTL: -1 for a key
// without expiry, 0 for one that is gone, else the remaining time.
func conflictTTL(r rueidis.RedisResult) time.Duration {
	pttl, err := r.AsInt64()
	switch {
	case err != nil || pttl == -1:
		return -1
	case pttl < 0:
		return 0
	}
	return time.Duration(pttl) * time.Millisecond
}
