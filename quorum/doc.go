// Package quorum locks the same batch of keys on several independent Redis
// deployments (clusters or single servers) and grants it only when a
// majority of them granted the whole batch within the lease's validity
// window: the RedLock construction, for batches. It survives the loss of a
// minority of deployments (a crash, a freeze, a failover that loses the
// last writes of one of them) where a lock on one deployment does not.
//
// Each deployment is served by an ordinary slotlock.Locker: the scripts,
// the all-or-nothing rule per deployment, renewal and loss tracking are
// the root package's. This package only counts: which deployments hold the
// batch, until when a majority of them does, and what to give back when a
// majority is not reached. docs/safety.md ("Quorum mode") says what that
// adds over one cluster and what it does not, and docs/design.md
// ("Quorum mode") why it is built this way.
package quorum
