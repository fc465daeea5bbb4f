package slotlock

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/slotlock/slotlock/internal/protocol"
)

// Request is the request form of an acquisition (Locker.Acquire): keys
// held exclusively, keys held shared, and permits of counted resources,
// granted together or not at all, with per-call TTL and waiting.
type Request struct {
	// Exclusive keys: one holder at a time, as with Lock.
	Exclusive []string
	// Shared keys: any number of shared holders at once, and no
	// exclusive holder meanwhile. A key may not be both shared and
	// exclusive in one request.
	Shared []string
	// Permits: units of counted resources.
	Permits []Permit
	// TTL of this lease (0: Options.TTL); at least a millisecond.
	TTL time.Duration
	// Wait is how long to wait for held keys and busy permits: 0 makes
	// one attempt, like TryLock (a *ConflictError if anything is held);
	// WaitForever waits as long as ctx allows, like Lock.
	Wait time.Duration
}

// WaitForever, as Request.Wait, waits until ctx ends.
const WaitForever = time.Duration(math.MaxInt64)

// Permit asks for Units of the counted resource Resource, of which at most
// Limit units are held at once, across every process. All holders of a
// resource must use one Limit: a request with another limit while the
// resource has live holders is refused (ErrInvalid naming the resource).
// A holder's units come back when it releases or its lease expires.
type Permit struct {
	Resource     string
	Units, Limit int64
}

// Acquire takes everything req asks for as one lease, all or nothing,
// across slots and nodes: in canonical order, with the rollback, renewal,
// lost-lease signal and reentrancy (WithOwner) of Lock, and one pipelined
// round trip per node per attempt. Bad input is refused with ErrInvalid,
// naming the offender, before anything is sent. Shared keys and permits
// need scripts: with StrategyPipeline (or after an Auto Locker switched)
// such a request fails with ErrUnsupported, having sent nothing.
//
// A shared grant gets no fencing token (Lease.FencingToken reports false
// for it), and Lease.Guard checks a lease's exclusive keys only:
// docs/design.md, "Shared keys and permits".
func (l *Locker) Acquire(ctx context.Context, req Request) (*Lease, error) {
	entries, ttl, err := l.checkRequest(req)
	if err != nil {
		return nil, err
	}
	o := acquireOptions{ttl: ttl, wait: req.Wait}
	if entries == nil {
		return l.acquireWith(ctx, req.Exclusive, nil, o) // Lock's own path, local queue included
	}
	return l.acquireWith(ctx, nil, entries, o)
}

// checkRequest refuses bad input, naming the offender, and returns the
// request's entries and TTL; no entries for a request of exclusive keys
// only, which takes Lock's path (its keys are not copied).
func (l *Locker) checkRequest(req Request) ([]protocol.Entry, time.Duration, error) {
	if l.closed.Load() {
		return nil, 0, ErrClosed
	}
	ttl := req.TTL
	switch {
	case ttl == 0:
		ttl = l.opt.TTL
	case ttl < time.Millisecond:
		return nil, 0, fmt.Errorf("%w: Request.TTL %v is below 1ms", ErrInvalid, req.TTL)
	}
	if req.Wait < 0 {
		return nil, 0, fmt.Errorf("%w: Request.Wait %v is negative", ErrInvalid, req.Wait)
	}
	n := len(req.Exclusive) + len(req.Shared) + len(req.Permits)
	if n == 0 {
		return nil, 0, fmt.Errorf("%w: empty request", ErrInvalid)
	}
	if n > l.opt.MaxKeys {
		return nil, 0, fmt.Errorf("%w: %d keys and permits, more than MaxKeys %d", ErrInvalid, n, l.opt.MaxKeys)
	}
	if len(req.Shared) == 0 && len(req.Permits) == 0 {
		for i, key := range req.Exclusive {
			if key == "" {
				return nil, 0, fmt.Errorf("%w: exclusive key %d is empty", ErrInvalid, i)
			}
		}
		return nil, ttl, nil
	}
	kind := make(map[string]protocol.Kind, len(req.Exclusive)+len(req.Shared))
	entries := make([]protocol.Entry, 0, n)
	add := func(keys []string, k protocol.Kind, what string) error {
		for i, key := range keys {
			if key == "" {
				return fmt.Errorf("%w: %s key %d is empty", ErrInvalid, what, i)
			}
			if prev, ok := kind[key]; ok {
				if prev != k {
					return fmt.Errorf("%w: key %q is both exclusive and shared", ErrInvalid, key)
				}
				continue // a repeated key, as Lock allows
			}
			kind[key] = k
			entries = append(entries, protocol.Entry{Name: key, Kind: k})
		}
		return nil
	}
	if err := add(req.Exclusive, protocol.Exclusive, "exclusive"); err != nil {
		return nil, 0, err
	}
	if err := add(req.Shared, protocol.Shared, "shared"); err != nil {
		return nil, 0, err
	}
	seen := make(map[string]bool, len(req.Permits))
	for i, p := range req.Permits {
		switch {
		case p.Resource == "":
			return nil, 0, fmt.Errorf("%w: permit %d has an empty resource name", ErrInvalid, i)
		case seen[p.Resource]:
			return nil, 0, fmt.Errorf("%w: permit %q asked for twice", ErrInvalid, p.Resource)
		case p.Units <= 0:
			return nil, 0, fmt.Errorf("%w: permit %q: units %d, must be at least 1", ErrInvalid, p.Resource, p.Units)
		case p.Limit <= 0:
			return nil, 0, fmt.Errorf("%w: permit %q: limit %d, must be at least 1", ErrInvalid, p.Resource, p.Limit)
		case p.Units > p.Limit:
			return nil, 0, fmt.Errorf("%w: permit %q: units %d above its limit %d", ErrInvalid, p.Resource, p.Units, p.Limit)
		}
		seen[p.Resource] = true
		entries = append(entries, protocol.Entry{Name: p.Resource, Kind: protocol.Permit, Units: p.Units, Limit: p.Limit})
	}
	return entries, ttl, nil
}
