// Package reentrant is the root package's engine for reentrant locks: it
// counts an owner's holds of each lock key in Redis, so that an owner that
// already holds a key can take it again and must release it as many times
// before the key is free. Users import the root package,
// github.com/slotlock/slotlock, and name the owner with its WithOwner.
//
// The count lives in a hold set beside each lock key and in its slot (see
// hold.lua), so every script stays single-slot and a batch that mixes keys
// the owner holds with free keys is still taken as one. The package
// exports what the root package and the Lua engine need, nothing more:
// OwnerToken, the holder that all leases of one owner write (the root
// package derives it from its Locker's secret), and HoldLua, the hold-set
// Lua that package batch composes into every script.
package reentrant
