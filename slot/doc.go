// Package slot computes where slotlock's keys live in a Redis Cluster,
// with no I/O: the hash slot of a key as the server computes it (KeySlot,
// HashTag), the canonical order every batch is taken in (Sorted, Less),
// the names of the lock key and its companions, all in the user key's slot
// (Namer), and the grouping of keys by the master that owns their slots
// (Map, GroupByNode).
//
// It is public so that other code can name and place lock keys exactly as
// slotlock does: the slotlock command, a tool that inspects locks, a
// caller that wants its own keys to share a slot.
package slot
