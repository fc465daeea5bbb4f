package protocol

import "time"

// Who identifies the writer of lock keys.
type Who struct {
	// Holder is the value written into the lock keys: the lease token, or
	// the owner token that all reentrant leases of one owner share.
	Holder string
	// Lease is the lease token when Holder is an owner token (the lease
	// then joins each key's hold set), and "" otherwise.
	Lease string
}

// KeyState is what an attempt knows of one key.
type KeyState uint8

const (
	// NotHeld: the key was not taken by this attempt (an error reply
	// means nothing was written).
	NotHeld KeyState = iota
	// Held: the key is the lease's, with an expiry this attempt set.
	Held
	// Kept: the key is the lease's, taken by an earlier attempt whose
	// expiry this attempt did not renew (the pipeline strategy finds its
	// own keys by reading them after a SET NX that did not take).
	Kept
	// Unknown: the reply was lost; the key may be the lease's. Only an
	// owner-checked release can clean it up.
	Unknown
)

// IsHeld reports whether the key is the lease's.
func (s KeyState) IsHeld() bool { return s == Held || s == Kept }

// Mode selects how an attempt treats a conflict.
type Mode uint8

const (
	// AllOrNothing takes a node's keys only if none of them is held by
	// someone else, and reports the conflicts it found (TryLock).
	AllOrNothing Mode = iota
	// Prefix takes, on each node, the keys before the first conflict in
	// canonical order, and leaves the conflicting key as it is (Lock).
	Prefix
	// Confirm is AllOrNothing for an acquisition that waited by
	// reservation (Queuer): keys reserved for it count as free, and it
	// leaves the queues of the keys it takes.
	Confirm
)

// AttemptOptions are the per-attempt settings.
type AttemptOptions struct {
	Mode Mode
	// First marks an acquisition's first attempt: the lease holds nothing
	// yet, so a plain one may take its keys with bare SET NX commands.
	First bool
	// Ticket is, with Confirm, the acquisition's ticket (Queuer.Ticket):
	// its queue entries are found by it, so that a confirm that takes a
	// free key leaves them (an entry left behind would be handed the key
	// at its release).
	Ticket string
}

// Conflict is a key held by another lease.
type Conflict struct {
	Index int           // into Set.Keys
	TTL   time.Duration // remaining life of the other holder's lock; -1 means none
	// Reserved: the key is reserved for a waiting acquisition, not held.
	// A waiter by reservation keeps its reservations while it waits, so
	// a waiter that keeps a prefix gives the whole prefix back before it
	// waits for such a key (see Lock).
	Reserved bool
}

// Attempt is the outcome of one acquire attempt.
type Attempt struct {
	// State has one entry per key of the set; keys the attempt did not
	// send keep NotHeld.
	State []KeyState
	// Fences holds, with fencing, the fencing token of every held key
	// (zero elsewhere).
	Fences    []int64
	Conflicts []Conflict // ascending Index
	// Node and Short are filled with MinReplicas: the master each sent
	// key went to, and the masters whose WAIT came back short (or not at
	// all), with how many replicas acknowledged.
	Node  []string
	Short map[string]int
	// Err joins the NodeErrors of calls that failed other than by
	// conflict. Calls failing with ErrStaleTopology wrote nothing; the
	// strategy has already refreshed its slot map.
	Err error
}

// FirstFailure returns the smallest index at or after from whose key is not
// the lease's, or len(State) when every key from `from` on is.
func (a *Attempt) FirstFailure(from int) int {
	for i := from; i < len(a.State); i++ {
		if !a.State[i].IsHeld() {
			return i
		}
	}
	return len(a.State)
}

// Grant is a successful acquisition.
type Grant struct {
	// Deadline is the client-side estimate of the keys' expiry: the
	// moment the granting attempt was sent plus the TTL. Every key was
	// written as a hold with the TTL by that attempt (or an earlier one
	// of the same acquisition), so none expires before it.
	Deadline time.Time
	// At is when the granting attempt was sent. A lease counts its hold
	// time from it.
	At time.Time
	// Fences are the fencing tokens per set index, with fencing on.
	Fences []int64
	// Warning is a *ReplicaError when replicas fell short and the caller
	// asked to be warned rather than refused.
	Warning error
}

// Request is what an acquisition needs besides the keys.
type Request struct {
	Who     Who
	TTL     time.Duration
	Fencing bool
	// MinReplicas > 0 waits for that many replica acknowledgements per
	// node (WAIT on the writes' connection) for up to ReplicaTimeout.
	MinReplicas    int
	ReplicaTimeout time.Duration
	// WarnOnReplicas keeps the keys when replicas fall short and reports
	// it in Grant.Warning; otherwise the acquisition is rolled back and
	// fails with a *ReplicaError.
	WarnOnReplicas bool
	// CleanupTimeout bounds the rollback after a failed acquisition. It
	// runs on a context detached from the caller's (a cancelled caller
	// must still not leave keys locked).
	CleanupTimeout time.Duration
	// Stats, when not nil, counts what the acquisition does (for an
	// observer); nil costs nothing.
	Stats *Stats
}

// Stats counts what one acquisition did.
type Stats struct {
	Attempts  int           // attempts sent
	Conflicts int           // keys found held by others, by attempts and a first reserve round
	Rollbacks int           // owner-checked releases of keys taken (trims and rollbacks)
	Waited    time.Duration // time spent in Wait and in retry pauses
	// RollbackErr is the error of the last rollback that could not settle
	// every key (they stay until their TTL).
	RollbackErr error
}

// ExtendJob is one lease of a batched renewal.
type ExtendJob struct {
	Set *Set
	Idx []int // the keys to extend; nil means all
	Who Who
	TTL time.Duration
	// MinReplicas > 0 follows each node's writes with WAIT, as for
	// grants: an extension the promoted replica never saw would leave the
	// key expiring earlier than the lease's deadline. A node that falls
	// short fails the extension of the leases with keys there (a
	// *ReplicaError); their deadline must stay where it was.
	MinReplicas    int
	ReplicaTimeout time.Duration
}

// OwnerResult is the outcome of an owner-checked operation on one set.
type OwnerResult struct {
	Lost []int // set indexes (ascending) of keys the lease no longer held
	// Failed are the set indexes (ascending) of keys whose command failed
	// (Err says how): they may still be the lease's.
	Failed []int
	Err    error
}

// Acked reads a WAIT reply, as every strategy must: a WAIT that failed
// (no reply, an error) acknowledged nothing. It returns how many replicas
// acknowledged and whether that is fewer than want.
func Acked(n int64, err error, want int) (acked int, short bool) {
	if err != nil {
		return 0, true
	}
	return int(n), int(n) < want
}
