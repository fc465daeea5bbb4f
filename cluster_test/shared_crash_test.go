package clustertest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/slotlock/slotlock"
)

// TestSharedHolderProcessKilled: a separate process holds shared keys on
// every master and 3 of a resource's 4 permits, and is killed with
// SIGKILL. While it lives, writers of its keys and a taker of 2 permits
// are refused (another reader is not). After the kill, each key is free
// for a writer, and the permits for the taker, at the holder's deadline
// (no grant returns before it; see crashAllowance) and not later than a
// second after it: the holds end by their TTL on the
// server, with nobody releasing them.
func TestSharedHolderProcessKilled(t *testing.T) {
	e := newEnv(t, 3*time.Minute)
	poller := e.locker(e.client(), slotlock.Options{TTL: 10 * time.Second, NoLocalQueue: true})
	for round, renew := range []bool{false, true} {
		ttl := 900 * time.Millisecond
		var shared []string
		for i := range 8 {
			shared = append(shared, fmt.Sprintf("sh%d:k%d", round, i))
		}
		shared = append(shared, fmt.Sprintf("{sh%d}:g1", round), fmt.Sprintf("{sh%d}:g2", round))
		pool := fmt.Sprintf("pool%d", round)
		p := startHolder(t, holderSpec{Addrs: e.c.Addrs(), Prefix: e.prefix, TTL: ttl, Renew: renew,
			Shared: shared, Permits: []slotlock.Permit{{Resource: pool, Units: 3, Limit: 4}}})
		granted := p.next(t, 60*time.Second)
		var mu sync.Mutex
		deadline := e.tl.fromSys(granted.Deadline)
		go func() {
			for ev := range p.events {
				if ev.Event == "renewed" {
					mu.Lock()
					deadline = e.tl.fromSys(ev.Deadline)
					mu.Unlock()
				}
			}
		}()
		take2 := slotlock.Request{Permits: []slotlock.Permit{{Resource: pool, Units: 2, Limit: 4}}}

		// While it lives: writers and 2 more permits refused, readers not.
		for _, k := range shared {
			_, err := poller.TryLock(e.ctx, k)
			if !errors.Is(err, slotlock.ErrNotAcquired) {
				t.Fatalf("writer of %q while a reader holds it: %v", k, err)
			}
		}
		if _, err := poller.Acquire(e.ctx, take2); !errors.Is(err, slotlock.ErrNotAcquired) {
			t.Fatalf("2 of 4 permits while 3 are held: %v", err)
		}
		// (Half the keys only: its release brings their expiry down to
		// the dead holder's, which the other half must reach alone.)
		if r, err := poller.Acquire(e.ctx, slotlock.Request{Shared: shared[:len(shared)/2]}); err != nil {
			t.Fatalf("a second reader: %v", err)
		} else if err := r.Release(e.ctx); err != nil {
			t.Fatalf("the second reader's release: %v", err)
		}

		if renew {
			time.Sleep(ttl) // three renewals
		} else {
			time.Sleep(ttl / 2)
		}
		p.kill()
		mu.Lock()
		dl := deadline
		mu.Unlock()

		// Poll each key (as a writer) and the permits until granted.
		type got struct{ sent, returned int64 }
		results := make([]got, len(shared)+1)
		var wg sync.WaitGroup
		for i := range results {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for e.ctx.Err() == nil {
					if e.tl.now() < dl-int64(100*time.Millisecond) {
						time.Sleep(20 * time.Millisecond)
					} else {
						time.Sleep(time.Millisecond)
					}
					ctx, cancel := context.WithTimeout(e.ctx, 2*time.Second)
					var lease *slotlock.Lease
					var err error
					if i < len(shared) {
						lease, err = poller.TryLock(ctx, shared[i])
					} else {
						lease, err = poller.Acquire(ctx, take2)
					}
					cancel()
					if errors.Is(err, slotlock.ErrNotAcquired) {
						continue
					}
					if err != nil {
						t.Errorf("poll %d: %v", i, err)
						return
					}
					results[i] = got{sent: e.tl.at(lease.Deadline().Add(-10 * time.Second)), returned: e.tl.now()}
					_ = lease.Release(e.ctx)
					return
				}
			}()
		}
		wg.Wait()
		for i, r := range results {
			name := pool
			if i < len(shared) {
				name = shared[i]
			}
			early := time.Duration(dl - r.sent)
			late := time.Duration(r.returned - dl)
			t.Logf("round %d (renew %v) %s: granting request sent %v after the deadline, returned %v after it", round, renew, name, -early, late)
			if r.returned < dl {
				t.Errorf("%s granted (returned) %v before the dead holder's deadline", name, -late)
			}
			if early > crashAllowance { // a slow round trip, not a violation (crashAllowance)
				t.Logf("%s granted to a request sent %v before the dead holder's deadline (returned after it)", name, early)
			}
			if late > time.Second {
				t.Errorf("%s freed %v after the dead holder's deadline", name, late)
			}
		}
		if t.Failed() {
			return
		}
	}
}
