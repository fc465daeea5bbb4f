// Package reentrant keeps per-owner hold counts for lock keys, so that an
// owner that already holds a key can take it again and must release it as
// many times before the key is free.
//
// The owner travels in a context (WithOwner), the Go form of a lock that is
// reentrant per thread. The count lives in Redis, in a hold set beside each
// lock key and in its slot (see hold.lua), so every script stays
// single-slot and a batch that mixes keys the owner holds with free keys is
// still taken as one.
//
// It is for the root package (owner identity) and the Lua strategy (the
// hold-set Lua, composed into every script).
package reentrant
