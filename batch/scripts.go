package batch

import (
	"crypto/sha1"
	_ "embed"
	"encoding/hex"
	"fmt"
	"regexp"
	"strings"

	"github.com/redis/rueidis"

	"github.com/slotlock/slotlock/internal/rediserr"
	"github.com/slotlock/slotlock/reentrant"
)

var (
	//go:embed scripts/common.lua
	commonLua string
	//go:embed scripts/acquire.lua
	acquireBody string
	//go:embed scripts/fence.lua
	fenceLua string
	//go:embed scripts/release.lua
	releaseBody string
	//go:embed scripts/release1.lua
	release1Body string
	//go:embed scripts/extend.lua
	extendBody string
	//go:embed scripts/guard.lua
	guardBody string
	//go:embed scripts/shared.lua
	sharedLua string
	//go:embed scripts/shared_acquire.lua
	sharedAcquireBody string
	//go:embed scripts/shared_release.lua
	sharedReleaseBody string
	//go:embed scripts/shared_extend.lua
	sharedExtendBody string
	//go:embed scripts/reserve.lua
	reserveBody string
)

// Shebangs. A script that declares flags makes Redis check for OOM once,
// before it runs, instead of at each write: that is what keeps a
// check-then-write script from stopping half way through its writes.
// allow-cross-slot-keys (Redis 7+) lets one call per node touch keys of all
// the node's slots; the call declares one key, which routes it.
//
// allow-oom: over maxmemory (noeviction), Redis refuses a script with a
// shebang outright unless it declares this flag. Release and extend
// declare it: they only delete keys, set expiries and publish, and a full
// server must still let locks go and keep leases alive instead of holding
// every lock until its TTL (TestOutOfMemory). Acquire and guard do not: a
// refused acquire has written nothing, and a guarded write may grow the
// data.
const (
	shebangNode    = "#!lua flags=allow-cross-slot-keys\n"
	shebangSlot    = "#!lua\n"
	shebangNodeOOM = "#!lua flags=allow-cross-slot-keys,allow-oom\n"
	shebangSlotOOM = "#!lua flags=allow-oom\n"
)

// script is one Lua body in its two forms: one call per node, keys in ARGV;
// or one call per slot, keys in KEYS. Each form is the shebang, the shared
// helpers (common.lua, and reentrant's hold.lua) and the body, all embedded
// files: Redis has no include, so the helpers travel with every script.
type script struct {
	name               string
	nodeText, slotText string
	nodeSHA, slotSHA   string
}

// newScript builds a script; allowOOM says whether it may run over
// maxmemory (see the shebangs).
func newScript(name, body string, allowOOM bool) *script {
	node, slot := shebangNode, shebangSlot
	if allowOOM {
		node, slot = shebangNodeOOM, shebangSlotOOM
	}
	s := &script{
		name:     name,
		nodeText: node + commonLua + reentrant.HoldLua() + body,
		slotText: slot + commonLua + reentrant.HoldLua() + body,
	}
	s.nodeSHA = sha1Hex(s.nodeText)
	s.slotSHA = sha1Hex(s.slotText)
	return s
}

// explainDenial adds to an ACL refusal of a command inside the script
// what Redis 7.0 leaves out: which command. Redis names the script's line
// (rediserr.DeniedInScript); the line's redis.call or redis.pcall names
// the command. Other errors come back unchanged.
func (s *script) explainDenial(err error) error {
	line, ok := rediserr.DeniedInScript(err)
	if !ok {
		return err
	}
	if cmd := commandOnLine(s.nodeText, line); cmd != "" {
		return fmt.Errorf("%w (refused by the ACL: %s, line %d of the %s script; docs/acl.md lists what each script needs)", err, cmd, line, s.name)
	}
	return fmt.Errorf("%w (refused by the ACL: a command, key or channel of the %s script; the node's ACL LOG names it, docs/acl.md)", err, s.name)
}

// commandOnLine returns the command that line n (1-based) of text runs
// through redis.call or redis.pcall, with its subcommand when it has one
// ("CLUSTER INFO"), or "" when the line runs none. (The node and slot
// forms of a script differ only in their first line, the shebang.)
func commandOnLine(text string, n int) string {
	lines := strings.Split(text, "\n")
	if n < 1 || n > len(lines) {
		return ""
	}
	m := callRE.FindStringSubmatch(lines[n-1])
	if m == nil {
		return ""
	}
	return strings.TrimSpace(m[1] + " " + m[2])
}

var callRE = regexp.MustCompile(`redis\.p?call\('([A-Za-z]+)'(?:, '([A-Z]+)')?`)

func sha1Hex(s string) string {
	sum := sha1.Sum([]byte(s))
	return hex.EncodeToString(sum[:])
}

var (
	// acquireScript alone draws fencing tokens: fence.lua's helpers go
	// before its body.
	acquireScript = newScript("acquire", fenceLua+acquireBody, false)
	releaseScript = newScript("release", releaseBody, true)
	extendScript  = newScript("extend", extendBody, true)
	guardScript   = newScript("guard", guardBody, false)
	// reserveScript is a waiter's reserve and leave (reserve.lua), with
	// shared.lua's helpers for permits. Its leave gives keys back, so it
	// may run over maxmemory, as release.
	reserveScript = newScript("reserve", sharedLua+reserveBody, true)
	// release1Script is the one-key release: one form, the key declared,
	// common.lua's helpers (for holder_of) but not the hold sets'. It
	// declares allow-cross-slot-keys only for its hand-off's SPUBLISH to
	// the waiter's inbox, a channel of another slot on the same node
	// (refused without the flag); its keys are all of one slot. A server
	// that refuses the flag fails it before it runs, and the general
	// release runs instead (releaseOne).
	release1Script = rueidis.NewLuaScript(shebangNodeOOM + commonLua + release1Body)
	// The request form's shared keys and permits: shared.lua's helpers
	// travel after common.lua's, in these three and reserve.
	sharedAcquireScript = newScript("acquire", sharedLua+sharedAcquireBody, false)
	sharedReleaseScript = newScript("release", sharedLua+sharedReleaseBody, true)
	sharedExtendScript  = newScript("extend", sharedLua+sharedExtendBody, true)
)
