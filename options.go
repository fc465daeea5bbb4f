package slotlock

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/slotlock/slotlock/slot"
)

// Defaults used where Options leaves a field zero.
const (
	DefaultTTL            = 30 * time.Second
	DefaultMaxKeys        = 100_000
	DefaultCleanupTimeout = 5 * time.Second
	DefaultReplicaTimeout = time.Second
	// MinTTL is the shortest TTL: Redis expiry has millisecond resolution.
	MinTTL = time.Millisecond
)

// Renew says whether the watchdog keeps a Locker's leases alive.
type Renew uint8

const (
	// RenewAlways, the default, renews every lease every TTL/3 until it is
	// released or lost, whatever the TTL: the TTL is how long keys outlive
	// a holder that crashed, not a limit on the work.
	RenewAlways Renew = iota
	// RenewNever never renews: a lease lives for its TTL unless extended
	// (Lease.Extend), and then ends as lost.
	RenewNever
)

// Options configure a Locker. The zero value is the sane default: 30 s lock
// keys, renewed by the watchdog until released.
type Options struct {
	// TTL is the life of every lock key of a lease, enforced by Redis
	// (PX), counted from each grant or renewal. Zero means DefaultTTL. It
	// must be at least MinTTL; whole milliseconds are used.
	TTL time.Duration
	// Renew selects whether the watchdog renews leases every TTL/3: by
	// default it does, until each lease is released.
	Renew Renew
	// Fencing gives every grant a fencing token per key (Lease.FencingToken),
	// strictly increasing across grants of that key, and carrying the
	// master's config epoch so that a failover cannot repeat one. It costs
	// one counter write per slot of the batch and one CLUSTER INFO per
	// call, and needs scripts (not with StrategyPipeline).
	Fencing bool
	// MinReplicas, when above zero, makes every acquisition wait until that
	// many replicas of each master involved acknowledged the lock writes
	// (WAIT, on the same connection as the scripts), for up to
	// ReplicaTimeout. Short of that, the acquisition is rolled back and
	// fails with ErrReplicas, or with WarnOnReplicas it succeeds and
	// Lease.Warning reports the shortfall. See docs/safety.md for what this
	// narrows and what it cannot close.
	MinReplicas    int
	ReplicaTimeout time.Duration
	// WarnOnReplicas keeps a grant whose replicas fell short and reports
	// it in Lease.Warning instead of failing; it needs MinReplicas.
	WarnOnReplicas bool
	// Prefix namespaces every key slotlock writes ("" means "slotlock").
	// It may not contain braces: lock keys carry a hash tag of their own.
	Prefix string
	// MaxKeys bounds the keys of one lease; larger requests fail with
	// ErrInvalid before anything is sent. Zero means DefaultMaxKeys.
	MaxKeys int
	// CleanupTimeout bounds the rollback that runs after a failed or
	// cancelled acquisition, on a context detached from the caller's.
	// Zero means DefaultCleanupTimeout.
	CleanupTimeout time.Duration
	// PerSlot sends one script per slot instead of one per node, as for
	// servers or proxies that refuse the allow-cross-slot-keys script flag
	// (slotlock also switches by itself when the server refuses it).
	PerSlot bool
	// Strategy selects scripts (Lua), pipelined SET NX (Pipeline), or
	// scripts with a switch to pipelines when the server refuses them
	// (Auto, the default).
	Strategy Strategy
	// Logger receives one line per state change worth an operator's
	// attention, never one per lock: a lease lost, the Auto strategy
	// switching to pipelines, a rollback that could not reach a node
	// (its keys stay locked until their TTL). Nil means silent.
	Logger *slog.Logger
	// Observer sees every acquisition, release, renewal round and lease
	// end, for metrics and traces (package slotlockotel implements it
	// with OpenTelemetry). Nil, the default, costs nothing.
	Observer Observer
	// NoLocalQueue turns off the in-process queue: goroutines of this
	// Locker that want the same keys then meet in Redis instead of
	// waiting in line in memory.
	NoLocalQueue bool
	// NoLossTracking turns off the server's notifications of lost keys
	// (RESP3 client tracking on one extra connection per master): a
	// lost key is then noticed by the watchdog, up to TTL/3 late, and
	// an expired lease at the watchdog's next tick. See docs/design.md,
	// "Seeing a lost lease at once", for what tracking costs the server.
	NoLossTracking bool
}

func (o Options) withDefaults() (Options, slot.Namer, error) {
	if o.TTL == 0 {
		o.TTL = DefaultTTL
	}
	if o.MaxKeys == 0 {
		o.MaxKeys = DefaultMaxKeys
	}
	if o.CleanupTimeout == 0 {
		o.CleanupTimeout = DefaultCleanupTimeout
	}
	if o.ReplicaTimeout == 0 {
		o.ReplicaTimeout = DefaultReplicaTimeout
	}
	if err := checkTTL(o.TTL); err != nil {
		return o, slot.Namer{}, err
	}
	switch {
	case o.Strategy > StrategyPipeline:
		return o, slot.Namer{}, fmt.Errorf("%w: Strategy %d", ErrInvalid, o.Strategy)
	case o.Renew > RenewNever:
		return o, slot.Namer{}, fmt.Errorf("%w: Renew %d", ErrInvalid, o.Renew)
	case o.MaxKeys < 0:
		return o, slot.Namer{}, fmt.Errorf("%w: MaxKeys %d", ErrInvalid, o.MaxKeys)
	case o.CleanupTimeout < 0:
		return o, slot.Namer{}, fmt.Errorf("%w: CleanupTimeout %v", ErrInvalid, o.CleanupTimeout)
	case o.MinReplicas < 0:
		return o, slot.Namer{}, fmt.Errorf("%w: MinReplicas %d", ErrInvalid, o.MinReplicas)
	case o.ReplicaTimeout < time.Millisecond:
		// WAIT with a timeout of 0 blocks forever.
		return o, slot.Namer{}, fmt.Errorf("%w: ReplicaTimeout %v is below 1ms", ErrInvalid, o.ReplicaTimeout)
	// Combinations that could never work: refused here rather than at
	// every Lock.
	case o.Strategy == StrategyPipeline && o.Fencing:
		return o, slot.Namer{}, fmt.Errorf("%w: Fencing needs scripts, which Strategy %v never uses", ErrInvalid, o.Strategy)
	case o.Strategy == StrategyPipeline && o.PerSlot:
		return o, slot.Namer{}, fmt.Errorf("%w: PerSlot chooses how scripts are sent, and Strategy %v sends none", ErrInvalid, o.Strategy)
	case o.WarnOnReplicas && o.MinReplicas == 0:
		return o, slot.Namer{}, fmt.Errorf("%w: WarnOnReplicas without MinReplicas (no replica is ever waited for)", ErrInvalid)
	}
	names, err := slot.NewNamer(o.Prefix)
	if err != nil {
		return o, slot.Namer{}, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return o, names, nil
}

func checkTTL(ttl time.Duration) error {
	if ttl < MinTTL {
		return fmt.Errorf("%w: TTL %v is below %v", ErrInvalid, ttl, MinTTL)
	}
	return nil
}
