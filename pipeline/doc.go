// Package pipeline is the root package's script-free engine: it acquires,
// extends and releases lock keys with pipelined SET NX PX and no Lua, for
// servers where scripts are denied (an ACL without @scripting, a proxy
// that rejects EVAL). Users import the root package,
// github.com/slotlock/slotlock, which switches to this engine
// (Options.Strategy).
//
// It is a protocol.Strategy (internal/protocol, which decides what an
// acquisition keeps, gives back and waits for), like the Lua engine
// (package batch). New and the Engine's methods take internal types
// because the methods implement protocol.Strategy (and ExtendMany the root
// package's interface of an engine), which Go satisfies across packages
// only with exported methods; no one outside this module can build their
// arguments.
//
// It writes lock values the Lua scripts understand (internal/lockval): the
// lease token as the plain value. A key whose value is the token, or the
// token followed by a Lua waiter's mark '!', is ours; anything else
// belongs to someone else. Leases of both strategies can therefore contend
// for the same keys.
//
// Without a script, checking a key and writing it are not one step on the
// server. Acquiring needs no check (SET NX is the check), but releasing and
// extending do: they use a conditional command where the server has one
// (DELEX and SET IFEQ on Redis 8.4+; DELIFEQ or DELEX, and SET IFEQ, on
// Valkey), and otherwise an optimistic transaction per slot (WATCH, GET,
// MULTI, DEL or PEXPIRE, EXEC) that the server aborts if a key changed
// after it was read. docs/strategies.md compares the two strategies.
package pipeline
