// Package protocol is the acquisition protocol of slotlock, written once
// for every strategy, and the types the strategies share.
//
// protocol.go has the TryLock and Lock loops with the argument for their
// guarantees (all or nothing, no deadlock, no livelock); a strategy (the
// Lua engine in package batch, the script-free one in package pipeline)
// only makes attempts, releases, extends and waits (Strategy). set.go is
// the key set of a lease; types.go what an attempt reports; errors.go the
// errors the strategies return, which the root package turns into its
// public types.
//
// It is for the packages of this module only.
package protocol
