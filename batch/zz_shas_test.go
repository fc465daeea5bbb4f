package batch

import (
	"fmt"
	"os"
	"testing"
)

func TestZZDumpShas(t *testing.T) {
	f, _ := os.Create("/tmp/shas.txt")
	defer f.Close()
	for i, s := range []*script{acquireScript, releaseScript, extendScript, guardScript, reserveScript, sharedAcquireScript, sharedReleaseScript, sharedExtendScript} {
		n := s.name
		if i >= 5 {
			n = "shared_" + n
		}
		fmt.Fprintln(f, s.nodeSHA, n+"-n")
		fmt.Fprintln(f, s.slotSHA, n+"-s")
	}
	fmt.Fprintln(f, sha1Hex(shebangNodeOOM+commonLua+release1Body), "release1")
}
