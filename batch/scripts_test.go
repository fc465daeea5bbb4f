package batch

import (
	"regexp"
	"strings"
	"testing"

	"github.com/slotlock/slotlock/reentrant"
)

// TestHelpersFor: a script carries the helpers its body uses and the ones
// they use, in the library's order, with their comments, and no other.
// Mutation checked: only the helpers the body names (no walk through
// their own uses) fails both parts.
func TestHelpersFor(t *testing.T) {
	lib := "-- a library\n\nlocal K = 3\n-- a's comment\nlocal function a(x)\n  return x + K\nend\nlocal function unused()\n  return 1\nend\nlocal function b(y)\n  return a(y)\nend\nlocal PAD = string.rep('#', 65)\n"
	got := helpersFor(lib, "return b(1)\n")
	want := "-- a library\n\nlocal K = 3\n-- a's comment\nlocal function a(x)\n  return x + K\nend\nlocal function b(y)\n  return a(y)\nend\n"
	if got != want {
		t.Errorf("helpersFor:\n%s\nwant:\n%s", got, want)
	}

	// Every script: a library helper it names is defined in it.
	libs := commonLua + reentrant.HoldLua() + fenceLua + sharedLua
	var names []string
	for _, m := range regexp.MustCompile(`(?m)^local (?:function )?([A-Za-z_][A-Za-z0-9_]*)`).FindAllStringSubmatch(libs, -1) {
		names = append(names, m[1])
	}
	if len(names) < 40 {
		t.Fatalf("%d helper names found in the libraries", len(names))
	}
	for _, s := range []*script{acquireScript, releaseScript, extendScript, guardScript, reserveScript, sharedAcquireScript, sharedReleaseScript, sharedExtendScript} {
		words := map[string]bool{}
		code := regexp.MustCompile(`--[^\n]*`).ReplaceAllString(s.nodeText, "")
		for _, w := range wordRE.FindAllString(code, -1) {
			words[w] = true
		}
		for _, n := range names {
			defined := strings.Contains(s.nodeText, "\nlocal function "+n+"(") || strings.Contains(s.nodeText, "\nlocal "+n+" = ")
			if words[n] && !defined {
				t.Errorf("%s script uses %s without its definition", s.name, n)
			}
		}
	}
}
