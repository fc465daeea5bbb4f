// Package tracking tells a Locker at once when a lock key one of its leases
// holds is changed or removed on the server, and when a lease's deadline
// passes, so that the lease ends in milliseconds instead of at the
// watchdog's next renewal (up to a third of the TTL later).
//
// How. The Tracker keeps one connection per master, taken from the
// caller's rueidis client (Dedicate, so it has the client's dialer, TLS
// and credentials), with RESP3 client tracking on in the default mode: the
// server remembers every key that connection reads and, the first time
// any client (or an expiry, an eviction, a flush) modifies one, pushes an
// invalidation naming it. After a grant the Tracker reads the lease's lock
// keys on that connection (one pipelined GET per key, one round trip per
// node, batched with every other lease's, never awaited by Lock): the read
// both registers the keys and checks that the lease still holds them.
//
// An invalidation is only a hint. The lease's own renewals (PEXPIRE), a
// flush, a reconnect, the server evicting entries of a full tracking table
// all produce one. Each invalidated key is read again on the same
// connection: the value still carrying the lease's holder means held (and
// the read registers the key again: a registration is spent by the
// invalidation that reports it), anything else (no key, another holder)
// is a confirmed loss. A nil invalidation (a flush, or the connection's
// end) re-reads every key of that node, on a new connection if the old one
// is gone. A read the node refuses as stale (MOVED, ASK: a failover or a
// resharding) goes to the new owner after a slot map refresh.
//
// Why not the alternatives. The acquire and extend scripts cannot do the
// registering themselves: they run on the caller's pooled connections,
// whose invalidations belong to the caller's client-side cache, and a
// script registers only the keys it DECLARES (checked on Redis 7.0.15:
// TestServerTrackingSemantics), while the one-call-per-node scripts declare
// one routing key and carry the rest in ARGV. Keyspace notifications need
// a server setting that managed clusters often refuse and would send every
// Locker every lock event of the cluster; sharded pub/sub published by
// scripts sees releases by scripts only, never an expiry or an operator's
// DEL.
//
// Deadlines. A lease whose renewals are blocked (a paused node, a paused
// client) loses its keys at its deadline, which the client knows: the
// Tracker ends such a lease when the deadline passes instead of at the
// watchdog's next tick. The deadline is the send time of the last
// successful grant or renewal plus the TTL, never later than the server's
// expiry, so this never ends a lease after the key could have been taken.
//
// The watchdog stays the backstop for everything the Tracker cannot see:
// a server that refuses CLIENT TRACKING (the Tracker then keeps the
// deadlines only), a node it cannot reach, a hold set changed by hand.
package tracking
