package bench

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"time"

	"github.com/redis/rueidis"

	"github.com/slotlock/slotlock/internal/rediserr"
)

// Contender is one way of locking batches of keys, set up for one cell and
// shared by its workers, as a service would share one client.
type Contender interface {
	// Acquirer returns what worker w locks with.
	Acquirer(w int) Acquirer
	Close() error
}

// Acquirer takes batches of keys for one worker.
type Acquirer interface {
	// Lock takes every key, waiting while any is held by someone else, and
	// returns when all are held, or with an error and none held.
	Lock(ctx context.Context, keys []string) (Held, error)
}

// Held is one batch of keys held by one acquirer.
type Held interface {
	// Check reads every lock key back from Redis (one pipelined GET) and
	// fails unless each holds this acquirer's token.
	Check(ctx context.Context) error
	// Release gives every key back; an error matching ErrNotHeld means the
	// library's own owner check found a key that was not ours any more.
	Release(ctx context.Context) error
}

// staller is a Contender whose acquisitions can stall and be retried by
// the benchmark; Stalls counts them, for the report.
type staller interface {
	Stalls() int64
}

// ErrNotHeld reports a key that its acquirer did not hold when it should
// have: a broken lock, and a failed benchmark.
var ErrNotHeld = errors.New("bench: key not held by its acquirer")

// Factory makes a Contender for a cell of W workers.
type Factory struct {
	Name string
	// About is one line for the report: what the contender does per batch.
	About string
	// Safe is false for the ceiling, which checks nothing.
	Safe bool
	New  func(env *Env, workers int) (Contender, error)
}

// Contenders lists every contender in report order.
var Contenders = []Factory{
	slotlockFactory("slotlock", false, false,
		"one Locker shared by the workers (default options): to lock, one bare SET NX PX per key up to 256 keys (one script call per node above that, or when a key is held), to release one script call per node; each in one pipelined round trip to all nodes"),
	slotlockFactory("slotlock-multi", false, true,
		"one Locker per worker over one shared client, in one process: no in-process queue between workers (the separate-process cells are below)"),
	slotlockFactory("slotlock-perslot", true, false,
		"Options{PerSlot: true}: one script call per slot instead of per node (the lock of up to 256 free keys is bare SET NX, as for slotlock), still one pipelined round trip"),
	setnxFactory,
	redsyncFactory,
	rueidislockFactory,
	redislockFactory,
	rawFactory,
}

// Lookup returns the factory named name.
func Lookup(name string) (Factory, bool) {
	for _, f := range append(Contenders[:len(Contenders):len(Contenders)], Probes...) {
		if f.Name == name {
			return f, true
		}
	}
	return Factory{}, false
}

// newToken returns 128 random bits, the owner token of one batch.
func newToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// backoff is the pause before the attempt-th retry of the hand-written
// acquire loops after a conflict: exponential from 1 ms to 64 ms, half of
// it random so that colliding workers do not retry in lockstep.
func backoff(attempt int) time.Duration {
	d := time.Millisecond << min(attempt, 6)
	return d/2 + mrand.N(d/2+1)
}

// checkValues reads lockKeys with one pipelined GET each and fails unless
// ok accepts every value; a missing key is passed as "" with found false.
func checkValues(ctx context.Context, client rueidis.Client, lockKeys []string, ok func(i int, v string, found bool) bool) error {
	cmds := make(rueidis.Commands, len(lockKeys))
	for i, k := range lockKeys {
		cmds[i] = client.B().Get().Key(k).Build()
	}
	var bad []string
	for i, r := range client.DoMulti(ctx, cmds...) {
		v, err := r.ToString()
		found := err == nil
		if err != nil && !rediserr.IsNil(err) {
			return fmt.Errorf("check: GET %s: %w", lockKeys[i], err)
		}
		if !ok(i, v, found) {
			bad = append(bad, lockKeys[i])
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("%w: %d of %d lock keys, e.g. %q", ErrNotHeld, len(bad), len(lockKeys), bad[0])
	}
	return nil
}
