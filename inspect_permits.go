package slotlock

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/redis/rueidis"

	"github.com/slotlock/slotlock/internal/lockval"
	"github.com/slotlock/slotlock/internal/rediserr"
	"github.com/slotlock/slotlock/slot"
)

// PermitInfo is what InspectPermits found for one counted resource: its
// live holders and the units they hold.
type PermitInfo struct {
	Resource string // as given in Permit.Resource
	Key      string // the Redis hash slotlock keeps for it
	Slot     uint16
	Node     string // the master that owns Slot, as the slot map says
	// Limit is the limit its live holders asked for, 0 when nobody holds
	// units; Used is the units they hold, never above Limit.
	Limit, Used int64
	// Holders are the live holders, latest expiry first. A holder whose
	// expiry passed (a crashed one, until the next acquisition, release
	// or renewal prunes it) holds nothing and is not listed.
	Holders []PermitHolder
	// Err is the failure of the reads of this resource; the other fields
	// are then zero but Resource, Key, Slot and Node.
	Err error
}

// PermitHolder is one lease's units of a resource.
type PermitHolder struct {
	ID    string        // Lease.ID of the holding lease
	Units int64         // units it holds
	TTL   time.Duration // until its hold expires, by the server's clock
}

// inspectPermitReads is the number of commands InspectPermits sends per
// resource.
const inspectPermitReads = 3

// InspectPermits reports, per resource and in the order given, who holds
// units of it: one pipeline per node, all nodes in parallel, reads only
// (HGETALL, PTTL and PEXPIRETIME of its hash; the last two give the
// server's time, against which holders' expiries are read). As Inspect,
// the reads are not a transaction, and a failed read is reported on its
// resource (PermitInfo.Err) and joined into the returned error.
func (l *Locker) InspectPermits(ctx context.Context, resources ...string) ([]PermitInfo, error) {
	for i, r := range resources {
		if r == "" {
			return nil, fmt.Errorf("slotlock: inspect permits: %w: resource %d is empty", ErrInvalid, i)
		}
	}
	nodeOf, err := l.inspectNodes(ctx, "inspect permits", resources)
	if err != nil {
		return nil, err
	}
	out := make([]PermitInfo, len(resources))
	cmds := make(rueidis.Commands, 0, inspectPermitReads*len(resources))
	b := l.client.B()
	for i, r := range resources {
		s := slot.KeySlot(r)
		h := l.names.PermitKeyInSlot(r, s)
		out[i] = PermitInfo{Resource: r, Key: h, Slot: s, Node: nodeOf(s)}
		cmds = append(cmds, b.Hgetall().Key(h).Build(), b.Pttl().Key(h).Build(), b.Pexpiretime().Key(h).Build())
	}
	return out, readAll(out, l.client.DoMulti(ctx, cmds...), inspectPermitReads)
}

// failed records a failed read of p, as KeyInfo.failed does.
func (p *PermitInfo) failed(err error) error {
	p.Err = &NodeError{Node: p.Node, Op: "inspect permits", Keys: 1,
		Kind: rediserr.Kind(err), Err: fmt.Errorf("resource %q: %w", p.Resource, err)}
	return p.Err
}

// read fills p from its replies (inspectPermitReads of them, in the
// order InspectPermits sends them).
func (p *PermitInfo) read(r []rueidis.RedisResult) error {
	fields, err := r[0].AsStrMap()
	if err != nil {
		return err
	}
	now, known, err := serverNow(r[1], r[2])
	if err != nil {
		return err
	}
	var limit int64
	for f, v := range fields {
		if f == lockval.PermitLimit {
			limit, _ = strconv.ParseInt(v, 10, 64)
			continue
		}
		units, exp, ok := lockval.ParsePermitHold(v)
		if !ok || known && exp <= now {
			continue // expired or malformed: holds nothing (read_holders)
		}
		h := PermitHolder{ID: lockval.Short(f), Units: units, TTL: -1}
		if known {
			h.TTL = time.Duration(exp-now) * time.Millisecond
		}
		p.Holders = append(p.Holders, h)
		p.Used += units
	}
	if len(p.Holders) > 0 {
		p.Limit = limit
	}
	slices.SortFunc(p.Holders, func(a, b PermitHolder) int { return cmp.Compare(b.TTL, a.TTL) })
	return nil
}
