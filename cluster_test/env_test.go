package clustertest

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/slotlock/slotlock"
	"github.com/slotlock/slotlock/internal/lockval"
	"github.com/slotlock/slotlock/internal/redistest"
	"github.com/slotlock/slotlock/slot"
)

// env is one scenario's private cluster: faults injected into it cannot leak
// into another scenario.
type env struct {
	t      *testing.T
	c      *redistest.Cluster
	ctx    context.Context // bounds the whole scenario
	prefix string
	names  slot.Namer
	tl     *timeline
	hist   *history
	rep    *report

	// abandoned holds the tokens of leases whose Release ran out of time:
	// their keys may stay until their TTL runs out, and no longer (the
	// watchdog stops renewing them; bug 9 of docs/faults.md, fixed).
	abandonedMu sync.Mutex
	abandoned   map[string]bool
}

// abandon records a lease whose Release ran out of time.
func (e *env) abandon(token string) {
	e.abandonedMu.Lock()
	defer e.abandonedMu.Unlock()
	if e.abandoned == nil {
		e.abandoned = map[string]bool{}
	}
	e.abandoned[token] = true
}

func (e *env) isAbandoned(token string) bool {
	e.abandonedMu.Lock()
	defer e.abandonedMu.Unlock()
	return e.abandoned[token]
}

// newEnv starts a private 3+3 cluster for t, bounded by limit.
func newEnv(t *testing.T, limit time.Duration) *env {
	t.Helper()
	return newEnvOn(t, redistest.StartForTest(t, redistest.Options{}), limit)
}

// newEnvOn is newEnv on a cluster several tests share in turn (each its
// own prefix), for regression tests that inject no fault a later one could
// meet.
func newEnvOn(t *testing.T, c *redistest.Cluster, limit time.Duration) *env {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	t.Cleanup(cancel)
	r := strings.NewReplacer("/", ":", "{", "(", "}", ")", " ", "_")
	prefix := "chaos:" + r.Replace(t.Name())
	names, err := slot.NewNamer(prefix)
	if err != nil {
		t.Fatal(err)
	}
	tl := newTimeline()
	return &env{t: t, c: c, ctx: ctx, prefix: prefix, names: names, tl: tl, hist: newHistory(tl), rep: newReport(t, string(c.Backend()))}
}

// client returns a new cluster client, closed with the test. Each client is
// what one application process would have: its own connections and its own
// view of the topology.
func (e *env) client() rueidis.Client {
	e.t.Helper()
	cl, err := e.c.Client()
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(cl.Close)
	return cl
}

// locker returns a Locker on client with the scenario's prefix.
func (e *env) locker(client rueidis.Client, opt slotlock.Options) *slotlock.Locker {
	e.t.Helper()
	opt.Prefix = e.prefix
	l, err := slotlock.New(client, opt)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = l.Close() })
	return l
}

// lockState is one lock key found on a master.
type lockKey struct {
	Node   string
	Holder string // the token part of the value ("" for a holders set or permit hash)
	Value  string
	// Holders are the tokens that hold the key: Holder, a shared key's one
	// holder, or the members of a holders set or permit hash.
	Holders []string
	PTTL    time.Duration
}

// lockKeys reads every lock key of the scenario's prefix on every master of
// the live topology: the ground truth of what is locked.
func (e *env) lockKeys(ctx context.Context) (map[string]lockKey, error) {
	masters, err := e.c.Masters(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string]lockKey{}
	for _, m := range masters {
		cursor := "0"
		for {
			res, err := m.Do(ctx, "SCAN", cursor, "MATCH", e.prefix+"{*", "COUNT", "1000").ToArray()
			if err != nil {
				return nil, fmt.Errorf("SCAN on %s: %w", m.Addr(), err)
			}
			if cursor, err = res[0].ToString(); err != nil {
				return nil, err
			}
			keys, err := res[1].AsStrSlice()
			if err != nil {
				return nil, err
			}
			for _, k := range keys {
				lk, ok, err := e.heldKey(ctx, m, k)
				if err != nil {
					return nil, err
				}
				if ok {
					out[k] = lk
				}
			}
			if cursor == "0" {
				break
			}
		}
	}
	return out, nil
}

// heldKey reads key k of m when it holds something: a lock key (exclusive
// or shared), a shared key's holders set (P{T}#s:K) or a permit hash
// (P{T}#p:R), the storage of docs/design.md ("What slotlock keeps in
// Redis"). Fencing counters, hold
// counts, lines and inboxes are not holds: ok is false for them, and for a
// key that expired since the listing.
func (e *env) heldKey(ctx context.Context, m *redistest.Node, k string) (lk lockKey, ok bool, err error) {
	lk.Node = m.Addr()
	_, lock := e.names.UserKey(k)
	switch {
	case lock:
		v, err := m.Do(ctx, "GET", k).ToString()
		if rueidis.IsRedisNil(err) {
			return lk, false, nil
		}
		if err != nil {
			return lk, false, fmt.Errorf("GET %s on %s: %w", k, m.Addr(), err)
		}
		lk.Value, lk.Holder = v, lockval.Parse(v).Holder
		if lk.Holder != "" {
			lk.Holders = []string{lk.Holder}
		}
	case strings.Contains(k, "}#s:"):
		lk.Holders, err = m.Do(ctx, "ZRANGE", k, "0", "-1").AsStrSlice()
		lk.Value = "holders set"
	case strings.Contains(k, "}#p:"):
		lk.Holders, err = m.Do(ctx, "HKEYS", k).AsStrSlice()
		lk.Holders = slices.DeleteFunc(lk.Holders, func(f string) bool { return strings.HasPrefix(f, "#") }) // the limit
		lk.Value = "permit hash"
	default:
		return lk, false, nil
	}
	if err != nil {
		return lk, false, fmt.Errorf("reading %s on %s: %w", k, m.Addr(), err)
	}
	if !lock && len(lk.Holders) == 0 {
		return lk, false, nil // expired since the listing
	}
	pttl, _ := m.Do(ctx, "PTTL", k).AsInt64()
	lk.PTTL = time.Duration(pttl) * time.Millisecond
	return lk, true, nil
}

// abandonedHold reports whether every holder of lk is a lease whose
// Release ran out of time.
func (e *env) abandonedHold(lk lockKey) bool {
	for _, h := range lk.Holders {
		if !e.isAbandoned(h) {
			return false
		}
	}
	return len(lk.Holders) > 0
}

// keySpace returns n keys to lock: plain keys spread over all masters, and
// every fourth key in a group of four that share a hash tag (one slot), as
// applications lock an entity's keys together.
func keySpace(n int) []string {
	out := make([]string, n)
	for i := range out {
		if i%4 == 0 && i+4 <= n {
			for j := range 4 {
				out[i+j] = fmt.Sprintf("{g%d}:f%d", i/4, j)
			}
		}
		if out[i] == "" {
			out[i] = fmt.Sprintf("k:%d", i)
		}
	}
	return out
}

// keysOn returns the keys of space whose slot node owns now.
func (e *env) keysOn(ctx context.Context, node *redistest.Node, space []string) []string {
	e.t.Helper()
	var out []string
	for _, k := range space {
		n, err := e.c.NodeForSlot(ctx, slot.KeySlot(k))
		if err != nil {
			e.t.Fatal(err)
		}
		if n == node {
			out = append(out, k)
		}
	}
	return out
}

// master returns the master that owns key's slot now.
func (e *env) master(ctx context.Context, key string) *redistest.Node {
	e.t.Helper()
	n, err := e.c.NodeForSlot(ctx, slot.KeySlot(key))
	if err != nil {
		e.t.Fatal(err)
	}
	return n
}

// waitReady waits for the cluster to settle after a fault.
func (e *env) waitReady() {
	e.t.Helper()
	if err := e.c.WaitReady(e.ctx); err != nil {
		e.t.Fatal(err)
	}
}

// requireUnlocked reads every lock key of the prefix on every master and
// fails the test if any is left: the workers released everything they were
// granted, and failed attempts must leave nothing. within allows keys that
// a lost reply may have left to run out their TTL first.
func (e *env) requireUnlocked(within time.Duration) map[string]lockKey {
	e.t.Helper()
	deadline := time.Now().Add(within)
	for {
		left, err := e.lockKeys(e.ctx)
		if err != nil {
			e.t.Fatalf("reading lock keys: %v", err)
		}
		for k, v := range left {
			// A lease whose Release ran out of time: its keys may stay
			// until their TTL runs out, not beyond (they once stayed for
			// ever, renewed by the watchdog: bug 9).
			if e.abandonedHold(v) {
				if v.PTTL <= 0 {
					e.t.Errorf("%s, of a lease whose Release timed out, has no expiry (pttl %v)", k, v.PTTL)
					continue
				}
				if until := time.Now().Add(v.PTTL + 500*time.Millisecond); until.After(deadline) {
					e.t.Logf("waiting %v for %s, of a lease whose Release timed out, to expire", v.PTTL, k)
					deadline = until
				}
			}
		}
		if len(left) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			n := 0
			for k, v := range left {
				if n++; n > 10 {
					break
				}
				e.t.Logf("left locked: %s (%s) on %s by %q (pttl %v)", k, v.Value, v.Node, v.Holders, v.PTTL)
			}
			e.t.Errorf("%d lock keys left locked after %v", len(left), within)
			return left
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// keysSplitBy names keys prefix:0, prefix:1, ... until it has at least
// on keys whose master is victim and off keys on other masters.
func (e *env) keysSplitBy(victim *redistest.Node, prefix string, on, off int) (onVictim, elsewhere []string) {
	e.t.Helper()
	for i := 0; len(onVictim) < on || len(elsewhere) < off; i++ {
		k := fmt.Sprintf("%s:%d", prefix, i)
		if e.master(e.ctx, k) == victim {
			onVictim = append(onVictim, k)
		} else {
			elsewhere = append(elsewhere, k)
		}
	}
	return onVictim, elsewhere
}

// startMigration puts the slot of key half way through a migration to the
// next master: IMPORTING on the target, MIGRATING on the source, no key
// moved yet. It returns the source, the target and the slot number.
func (e *env) startMigration(key string) (src, dst *redistest.Node, s string) {
	e.t.Helper()
	s = strconv.Itoa(int(slot.KeySlot(key)))
	src = e.master(e.ctx, key)
	masters, err := e.c.Masters(e.ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	dst = masters[(indexOf(masters, src)+1)%len(masters)]
	if err := dst.Do(e.ctx, "CLUSTER", "SETSLOT", s, "IMPORTING", src.ID()).Error(); err != nil {
		e.t.Fatal(err)
	}
	if err := src.Do(e.ctx, "CLUSTER", "SETSLOT", s, "MIGRATING", dst.ID()).Error(); err != nil {
		e.t.Fatal(err)
	}
	// Called off in any case, for the next test on a shared cluster.
	e.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for _, n := range []*redistest.Node{dst, src} {
			_ = n.Do(ctx, "CLUSTER", "SETSLOT", s, "STABLE").Error()
		}
	})
	return src, dst, s
}

// callOffMigration ends startMigration's half-done migration: the slot
// stays with src.
func (e *env) callOffMigration(src, dst *redistest.Node, s string) {
	e.t.Helper()
	for _, n := range []*redistest.Node{dst, src} {
		if err := n.Do(e.ctx, "CLUSTER", "SETSLOT", s, "STABLE").Error(); err != nil {
			e.t.Fatal(err)
		}
	}
}
