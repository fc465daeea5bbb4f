// Package rediserr is the one place that reads Redis's and rueidis's error
// replies: it sorts the failure of one command into the three kinds the
// engines act on (nothing ran and a fresh slot map will fix it; the reply
// was lost and the command may have run; any other error reply), and it
// recognises the few refusals the library reacts to (scripts denied, a
// script flag refused, a conditional command missing). Every match on
// Redis's error text is here, with the server behaviour it relies on.
package rediserr

import (
	"errors"
	"strconv"
	"strings"

	"github.com/redis/rueidis"
)

// The kinds of a failed command. Their messages are the library's own:
// the root package exports them under the same names.
var (
	// ErrRedis is an error reply: the command did not run, or ran and
	// failed before writing (scripts check every key before they write).
	ErrRedis = errors.New("slotlock: redis error")
	// ErrUnknownOutcome is a command whose reply never came (connection
	// lost, deadline): it may or may not have run.
	ErrUnknownOutcome = errors.New("slotlock: outcome unknown")
	// ErrStaleTopology is a command that reached a node which no longer
	// serves (all of) its keys' slots: nothing of it was written, and a
	// fresh slot map will route it right.
	ErrStaleTopology = errors.New("slotlock: topology changed")
	// ErrPermission is an error reply of the server's ACL: the user may
	// not run a command, or touch a key or channel. It comes with
	// ErrRedis (errors.Is matches both); nothing of the refused command
	// ran.
	ErrPermission = errors.New("slotlock: refused by the server's ACL")
)

// reply returns the error reply inside err, which may wrap it (rueidis's
// own IsRedisErr is a type assertion: a reply wrapped with %w read as a
// lost one, and a tracking connection refused by an ACL was retried
// forever). The nil reply is not an error reply.
func reply(err error) (*rueidis.RedisError, bool) {
	var re *rueidis.RedisError
	if !errors.As(err, &re) || rueidis.IsRedisNil(re) {
		return nil, false
	}
	return re, true
}

// Denied reports an error reply of the server's ACL. At top level Redis
// answers NOPERM and names the command ("no permissions to run the 'set'
// command") or says a key or channel was refused. Inside a script Redis
// 7.0 answers "The user executing the script can't run this command or
// subcommand" (or "... access at least one of the keys", "... publish to
// the channel") and names nothing: its ACL LOG does. Redis 7.2 and later
// and Valkey answer "ACL failure in script: User u has no permissions to
// run the 'pttl' command" (or "No permissions to access a key" / "a
// channel"); TestTLSAndACL meets both forms on the servers CI runs.
func Denied(err error) bool {
	re, ok := reply(err)
	if !ok {
		return false
	}
	msg := re.Error()
	return strings.HasPrefix(msg, "NOPERM") || deniedInScript(msg)
}

// deniedInScript reports either server's words for a refusal inside a
// script (Denied).
func deniedInScript(msg string) bool {
	return strings.Contains(msg, "The user executing the script can't") ||
		strings.Contains(msg, "ACL failure in script")
}

// DeniedInScript reports an ACL refusal of a command a script ran, which
// Redis 7.0 does not name (Denied), and the script's line that ran it:
// Redis ends a script's error with "on @user_script:N." (0 when it does
// not).
func DeniedInScript(err error) (line int, ok bool) {
	if !Denied(err) || !deniedInScript(err.Error()) {
		return 0, false
	}
	msg := err.Error()
	if i := strings.LastIndex(msg, "@user_script:"); i >= 0 {
		rest := msg[i+len("@user_script:"):]
		n := 0
		for _, r := range rest {
			if r < '0' || r > '9' {
				break
			}
			n = n*10 + int(r-'0')
		}
		return n, true
	}
	return 0, true
}

// Kind returns ErrRedis, ErrUnknownOutcome or ErrStaleTopology for the
// non-nil error of one command. A nil reply (rueidis.Nil) is a reply, not a
// lost one: callers that accept nil replies test IsNil first.
func Kind(err error) error {
	if _, isRedis := reply(err); !isRedis {
		return ErrUnknownOutcome
	}
	if IsStale(err) {
		return ErrStaleTopology
	}
	return ErrRedis
}

// Lost reports whether err is neither nil, nor an error reply, nor a nil
// reply: the connection failed or the context ended before the reply came.
// (the nil reply is not an error reply, so "not a Redis error" alone
// would count a nil reply as lost.)
func Lost(err error) bool {
	if err == nil || IsNil(err) {
		return false
	}
	_, isRedis := reply(err)
	return !isRedis
}

// IsErrorReply reports whether err is an error reply of the server (not a
// nil reply, not a lost one): the command was refused or failed there.
func IsErrorReply(err error) bool {
	_, ok := reply(err)
	return ok
}

// IsNil reports whether err is the nil reply (GET of a missing key, SET NX
// of an existing one).
func IsNil(err error) bool { return errors.Is(err, rueidis.Nil) }

// IsStale reports whether an error reply says the slot map used to route a
// command no longer matches the cluster: the keys live elsewhere now, or a
// slot is in the middle of a migration.
func IsStale(err error) bool {
	if err == nil {
		return false
	}
	if re, ok := reply(err); ok {
		if _, moved := re.IsMoved(); moved {
			return true
		}
		if _, ask := re.IsAsk(); ask {
			return true
		}
		if re.IsTryAgain() || re.IsClusterDown() {
			return true
		}
	}
	msg := err.Error()
	// A script that touches a key of a slot this node no longer serves
	// (or serves only through ASKING) fails with "non local key"; nothing
	// it would have written after that point was written.
	return strings.Contains(msg, "non local key") ||
		strings.Contains(msg, "do not hash to the same slot") ||
		strings.Contains(msg, "CROSSSLOT") ||
		strings.Contains(msg, "TRYAGAIN") ||
		strings.HasPrefix(msg, "MOVED ") ||
		strings.HasPrefix(msg, "ASK ") ||
		strings.HasPrefix(msg, "CLUSTERDOWN")
}

// IsNoScript reports a NOSCRIPT reply: the node's script cache does not
// have the script (a restart, a freshly promoted replica); EVAL will do.
func IsNoScript(err error) bool {
	re, ok := reply(err)
	return ok && re.IsNoScript()
}

// ScriptsDenied reports an error reply saying the server refuses scripts
// at all: an ACL without @scripting (NOPERM), or a server or proxy that
// does not know EVAL/EVALSHA. A refused script wrote nothing.
func ScriptsDenied(err error) bool {
	if _, ok := reply(err); !ok {
		return false
	}
	msg := err.Error()
	return strings.HasPrefix(msg, "NOPERM") ||
		strings.Contains(msg, "unknown command") && strings.Contains(strings.ToLower(msg), "eval")
}

// FlagRefused reports an error reply refusing a script's shebang flags:
// Redis 7 answers "Unexpected flag in script shebang" to a flag it does not
// know, and proxies that parse scripts say "shebang" too. Nothing ran.
func FlagRefused(err error) bool {
	_, ok := reply(err)
	return ok && strings.Contains(err.Error(), "shebang")
}

// CommandRefused reports an error reply saying the server does not have (or
// will not let this user run) a command or one of its options: NOPERM, an
// unknown command, a syntax error for an option it does not know (SET ...
// IFEQ before Valkey 8.1 and Redis 8.4). Nothing ran.
func CommandRefused(err error) bool {
	re, ok := reply(err)
	if !ok {
		return false
	}
	msg := re.Error()
	return strings.HasPrefix(msg, "NOPERM") ||
		strings.Contains(msg, "unknown command") ||
		strings.Contains(msg, "syntax error")
}

// limitPrefix starts the error reply of scripts/shared_acquire.lua when a
// permit's live holders asked for another limit.
const limitPrefix = "SLOTLOCK_LIMIT "

// LimitMismatch reads shared_acquire.lua's refusal of a permit whose live
// holders use another limit: the entry's 1-based position in the call and
// the limit in use.
func LimitMismatch(err error) (pos int, limit int64, ok bool) {
	if err == nil || !IsErrorReply(err) {
		return 0, 0, false
	}
	_, rest, found := strings.Cut(err.Error(), limitPrefix)
	if !found {
		return 0, 0, false
	}
	f := strings.Fields(rest)
	if len(f) != 2 {
		return 0, 0, false
	}
	p, err1 := strconv.Atoi(f[0])
	l, err2 := strconv.ParseInt(f[1], 10, 64)
	return p, l, err1 == nil && err2 == nil
}
