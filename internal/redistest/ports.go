package redistest

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
)

// Ports are drawn from a range below Linux's default ephemeral range
// (32768-60999). Outgoing connections take their local port from the
// ephemeral range, so a port picked there could be grabbed by some client
// socket between our check and the bind, or while a killed node is down
// waiting for its Restart on the same port.
const (
	portLow  = 20000
	portHigh = 32000
)

// portLease holds one port for this process until release. The hold is an
// advisory lock on a file named after the port, shared by every test binary
// of the machine: `go test ./...` starts one cluster per package at the same
// time, and a port that is free now (because its node is killed, or not yet
// started) must not be handed to another package. The kernel drops the lock
// when the process dies, so a crash leaks nothing.
type portLease struct {
	port int
	file *os.File
}

func (l *portLease) release() {
	if l != nil && l.file != nil {
		l.file.Close() // closing drops the flock
		l.file = nil
	}
}

// leasePorts returns n distinct ports that no other harness holds and that
// nothing listens on right now.
func leasePorts(n int) ([]*portLease, error) {
	dir := filepath.Join(os.TempDir(), "slotlock-ports")
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return nil, fmt.Errorf("redistest: port lock dir: %w", err)
	}
	var leases []*portLease
	for attempt := 0; len(leases) < n; attempt++ {
		if attempt > 2000 {
			for _, l := range leases {
				l.release()
			}
			return nil, errors.New("redistest: no free port pair found in 20000-32000")
		}
		port := portLow + rand.IntN(portHigh-portLow)
		l, err := tryLease(dir, port)
		if err != nil {
			continue
		}
		leases = append(leases, l)
	}
	return leases, nil
}

func tryLease(dir string, port int) (*portLease, error) {
	f, err := os.OpenFile(filepath.Join(dir, strconv.Itoa(port)+".lock"), os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, err
	}
	// Someone outside the harness may listen there (another service, or a
	// container left over by a crashed run).
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		f.Close()
		return nil, err
	}
	ln.Close()
	return &portLease{port: port, file: f}, nil
}
