package clustertest

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/slotlock/slotlock/internal/lockval"
)

// TestEveryKindWithKilledWaiters: four processes, one of each kind of
// lease (plain, reentrant, shared-key requests, requests with permits),
// each one client and one Locker with four workers, lock random batches
// of 1-6 of 24 keys in a loop, holding each 2 ms. Meanwhile short-lived
// processes of a random kind join the same loop and are SIGKILLed 50-800
// ms after they start: most die waiting (their reservations, queue
// entries, line places and inbox), some holding. Then:
//   - nothing is granted twice, and no resource goes over its limit:
//     porcupine over every hold of the four survivors (a killed process's
//     holds are not reported; they end by their TTL of 2 s, and a
//     survivor never shares a key with one while it lives, which the
//     survivors' own holds cannot show);
//   - every survivor kind keeps being granted after kills (each holds in
//     the last third of the run) and no wait of theirs runs out (30 s);
//   - once every process is gone, nothing is left: every lock key, queue
//     and permit expires within the dead's TTL plus an entry's life
//     (lockval.EntryTTL) and a margin.
//
// Mutations: reservations that live a minute (RESERVE_MS = 60000: a
// dead waiter's reservations keep survivors out; waits ran out and the
// reentrant process stopped being granted); a shared release deleting
// the lock key while other readers hold it (porcupine: a writer granted
// beside readers).
func TestEveryKindWithKilledWaiters(t *testing.T) {
	sc := chaosScale()
	e := newEnv(t, pick(sc, 3*time.Minute, 10*time.Minute))
	e.waitReady()
	space := keySpace(24)
	run := pick(sc, 20*time.Second, 90*time.Second)
	kinds := []string{"", "reentrant", "shared", "request"}
	spec := func(kind string, seed uint64, ttl time.Duration) contenderSpec {
		return contenderSpec{Addrs: e.c.Addrs(), Prefix: e.prefix, TTL: ttl, Space: space, KMax: 6,
			Seed: seed, Hold: 2 * time.Millisecond, Workers: 4, History: true, Kind: kind}
	}
	procs := make([]*contenderProc, len(kinds))
	for i, kind := range kinds {
		procs[i] = startContender(t, spec(kind, uint64(500+i), 10*time.Second))
	}
	r := rand.New(rand.NewPCG(11, uint64(time.Now().UnixNano())))
	start := time.Now()
	end := start.Add(run)
	killed := map[string]int{}
	for n := 0; time.Now().Before(end); n++ {
		kind := kinds[r.IntN(len(kinds))]
		v := startContender(t, spec(kind, uint64(900+n), 2*time.Second))
		time.Sleep(50*time.Millisecond + time.Duration(r.Int64N(int64(750*time.Millisecond)))) // its life, not an ordering
		v.kill()
		killed[fmt.Sprintf("%q", kind)]++
	}
	lastThird := sysMonotonic() - int64(run/3)
	h := newHistory(e.tl)
	timeouts := 0
	for i, p := range procs {
		late := 0
		for _, ev := range p.finish(t, i, 45*time.Second) {
			if ev.Event == "timeout" {
				timeouts++
			}
			if ev.Event != "held" {
				continue
			}
			if ev.From > lastThird {
				late++
			}
			h.hs = append(h.hs, &hold{ID: len(h.hs) + 1, Owner: fmt.Sprintf("process %d", i), Token: ev.Token,
				Keys: ev.Keys, Shared: ev.Shared, Permits: ev.Permits,
				Call: e.tl.fromSys(ev.Call), Granted: e.tl.fromSys(ev.From), End: e.tl.fromSys(ev.To), EndRet: e.tl.fromSys(ev.Ret),
				How: ev.How, ended: true})
		}
		if late == 0 {
			t.Errorf("process %d (%q) held nothing in the last third of the run", i, kinds[i])
		}
	}
	v := h.check(t, false)
	t.Logf("%d holds, processes killed by kind %v, %d waits ran out (30 s)", v.Holds, killed, timeouts)
	e.rep.set("grants", v.Holds)
	e.rep.set("violations", v.Violations())
	v.requireSafe(t)
	if timeouts > 0 {
		t.Errorf("%d waits of the survivors ran out", timeouts)
	}
	e.requireUnlocked(10*time.Second + lockval.EntryTTL + 5*time.Second)
}
