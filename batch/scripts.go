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

// newScript builds a script of body after the helpers it uses, of
// common.lua, hold.lua and libs; allowOOM says whether it may run over
// maxmemory (see the shebangs).
func newScript(name, body string, allowOOM bool, libs ...string) *script {
	node, slot := shebangNode, shebangSlot
	if allowOOM {
		node, slot = shebangNodeOOM, shebangSlotOOM
	}
	text := helpersFor(commonLua+reentrant.HoldLua()+strings.Join(libs, ""), body) + body
	s := &script{
		name:     name,
		nodeText: node + text,
		slotText: slot + text,
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

// helpersFor returns the definitions of lib (top-level `local function
// name` ... `end` blocks and one-line `local NAME = value` lines, each
// with the comment above it) that body uses, directly or through another,
// in lib's order. Every top-level statement of a script runs at every
// call: a helper the script never calls would still cost its master a
// closure per call. Any other top-level line in lib panics: the split
// would be wrong.
func helpersFor(lib, body string) string {
	type def struct {
		name, text string
	}
	var defs []def
	var pending strings.Builder // comments and blank lines above a definition
	lines := strings.SplitAfter(lib, "\n")
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		if strings.TrimSpace(l) == "" || strings.HasPrefix(l, "--") {
			pending.WriteString(l)
			continue
		}
		m := defRE.FindStringSubmatch(l)
		if m == nil {
			panic(fmt.Sprintf("batch: a helper library's line %q is not a definition", l))
		}
		text := pending.String() + l
		pending.Reset()
		if m[1] != "" { // a function: up to its column-0 end
			for i++; i < len(lines) && strings.TrimRight(lines[i], "\n") != "end"; i++ {
				text += lines[i]
			}
			if i == len(lines) {
				panic("batch: helper " + m[2] + " has no end")
			}
			text += lines[i]
		}
		defs = append(defs, def{m[2], text})
	}
	used := map[string]bool{}
	for _, w := range wordRE.FindAllString(body, -1) {
		used[w] = true
	}
	// Dependencies come before their users: walk back once.
	keep := make([]bool, len(defs))
	for i := len(defs) - 1; i >= 0; i-- {
		if !used[defs[i].name] {
			continue
		}
		keep[i] = true
		for _, w := range wordRE.FindAllString(defs[i].text, -1) {
			used[w] = true
		}
	}
	var b strings.Builder
	for i, d := range defs {
		if keep[i] {
			b.WriteString(d.text)
		}
	}
	return b.String()
}

var (
	defRE  = regexp.MustCompile(`^local (function )?([A-Za-z_][A-Za-z0-9_]*)(\(| = [^{(]*$| = [^{]*\)\s*$)`)
	wordRE = regexp.MustCompile(`[A-Za-z_][A-Za-z0-9_]*`)
)

func sha1Hex(s string) string {
	sum := sha1.Sum([]byte(s))
	return hex.EncodeToString(sum[:])
}

var (
	// acquireScript alone draws fencing tokens: fence.lua's helpers go
	// before its body.
	acquireScript = newScript("acquire", acquireBody, false, fenceLua)
	releaseScript = newScript("release", releaseBody, true)
	extendScript  = newScript("extend", extendBody, true)
	guardScript   = newScript("guard", guardBody, false)
	// reserveScript is a waiter's reserve and leave (reserve.lua), with
	// shared.lua's helpers for permits. Its leave gives keys back, so it
	// may run over maxmemory, as release.
	reserveScript = newScript("reserve", reserveBody, true, sharedLua)
	// release1Script is the one-key release: one form, the key declared,
	// common.lua's helpers (for holder_of) but not the hold sets'. It
	// declares allow-cross-slot-keys only for its hand-off's SPUBLISH to
	// the waiter's inbox, a channel of another slot on the same node
	// (refused without the flag); its keys are all of one slot. A server
	// that refuses the flag fails it before it runs, and the general
	// release runs instead (releaseOne).
	release1Script = rueidis.NewLuaScript(shebangNodeOOM + helpersFor(commonLua, release1Body) + release1Body)
	// The request form's shared keys and permits: shared.lua's helpers
	// travel after common.lua's, in these three and reserve.
	sharedAcquireScript = newScript("acquire", sharedAcquireBody, false, sharedLua)
	sharedReleaseScript = newScript("release", sharedReleaseBody, true, sharedLua)
	sharedExtendScript  = newScript("extend", sharedExtendBody, true, sharedLua)
)
