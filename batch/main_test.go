package batch

import (
	"os"
	"testing"

	"github.com/slotlock/slotlock/internal/redistest"
)

// cluster is the package's cluster for the script-level tests (one start
// for all of them: redistest.Main); tests that migrate slots start their
// own (redistest.StartForTest).
var cluster *redistest.Cluster

func TestMain(m *testing.M) { os.Exit(redistest.Main(m, redistest.Options{}, &cluster)) }
