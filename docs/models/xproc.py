"""Discrete-event model of cross-process waiting policies for slotlock
(issue 15), written to choose a design; the one built is docs/design.md,
"Waiting by reservation across processes".
Run: python3 docs/models/xproc.py, then the same with the arguments
"4000 shapes" and "4000 big" (the three outputs, in that order:
docs/models/xproc-output.txt).

16 workers, each its own process (no in-process queue, except the
`inproc` baseline), loop: draw 10 of 200 keys, lock, release at once.
3 nodes; key k lives on node k % 3; canonical order = (node, key).
Time unit: one round trip (RTT). One-way delay 0.5 with jitter. Every
client reaction costs `c` (CPU). A node runs scripts instantly, in arrival
order. Pub/sub messages and replies travel independently (may reorder).

Policies
  today     canonical prefix kept while waiting, conflict key marked, release
            wakes every subscriber of the key (herd); retry everything
  greedy    per-node all-or-nothing, partial grants given back at once,
            waiter queued (weak) on its conflicting keys; a release wakes all
            queued waiters of the key; a waiter retries when every key it
            conflicted on was released since its attempt
  strict    hand-off on release to the oldest queued waiter (reservation);
            every waiter also reserves the free keys of nodes it failed on;
            reservations kept until commit (per-key strict age priority)
  handoff   hand-off to the oldest queued waiter; free keys not reserved;
            handed keys kept
  age:A     weak waiters behave as in greedy; a waiter older than A is strong:
            hand-offs go to the oldest entry only if strong (else wake all),
            strong waiters reserve free keys of the nodes they failed on and
            keep reservations; a weak waiter that was handed keys... never is
  giveback:A  hand-off to the oldest entry always; a waiter that is not
            strong (age < A) and fails its next attempt gives the handed keys
            back (passing them to the next oldest entry, or freeing them)
  coop      the chosen design: per-key queues by ticket, hand-off to the
            oldest entry on release, every waiter reserves the free keys
            of nodes it failed on and converts its partial holds into
            reservations; an older waiter meeting a younger one's
            reservation asks it to yield (cooperative wound-wait); a
            waiter whose keys are all reserved for it is granted at once
            (no commit round); a background confirm per node follows
            (coop-lazy: not counted, the hold being shorter than R/4)
  coop-confirm  coop as built (issue 15's second step): the grant waits
            for a confirm round, one call per node that turns the waiter's
            reservations into holds (all or nothing per call); a failed
            confirm turns the holds it took back into reservations and
            attempts again
  coop-seq  coop-lazy without its oracle: a hand-off message carries the
            call that created the entry it popped, replies report the
            entry a waiter stands under, and a message naming an older
            entry than the latest report is ignored (rule F of
            internal/protocol/evidence.go). coop and coop-lazy instead
            read the server's state when a message arrives.
  coop-naive  coop-seq trusting every message. This model has no
            reservation expiry, no lost replies and no pauses, and a
            waiter gives away only keys it knows are its own, so no
            message is ever stale here: coop-naive makes no violation
            and the same figures. What the two rows show is that rule F
            costs no grant, not that it is needed (the cases that need it
            are in the spec, section 2.4)
  inproc    baseline: one process, localq 'oldest' in memory, then one RTT
            to lock in Redis (never conflicts) and one RTT to release
"""
import heapq
import random
import sys

NODES = 3


class Sim:
    def __init__(self, policy, A=0.0, W=16, K=10, N=200, c=0.1, horizon=4000.0,
                 seed=1, jitter=0.2, kill=None, lazy=False, nofree=False, confirm=False,
                 seq=None):
        self.lazy, self.nofree, self.confirm = lazy, nofree, confirm
        # seq: None, the waiter reads the server's state when a hand-off
        # message arrives (an oracle: what coop and coop-lazy assume);
        # 'floor', it trusts a message only if the entry it names was
        # created no earlier than the entry its latest reply reported
        # (rule F, internal/protocol/evidence.go); 'naive', it trusts
        # every message (the mutation rule F must catch).
        self.seqrule = seq
        self.entry = {}       # (key, wid) -> gen of the call that created the entry
        self.cfails = 0
        self.policy, self.A, self.W, self.K, self.N, self.c = policy, A, W, K, N, c
        self.horizon, self.rng, self.jitter = horizon, random.Random(seed), jitter
        self.ev, self.seq, self.now = [], 0, 0.0
        # server state
        self.holder = {}      # key -> wid
        self.resv = {}        # key -> wid
        self.queue = {k: {} for k in range(N)}   # key -> {wid: ticket}
        self.subs = {k: set() for k in range(N)}  # today: subscribers
        # client state
        self.req = {}
        self.waits, self.done = [], 0
        self.attempts = self.msgs = self.timeouts = self.calls = self.violations = 0
        # inproc
        self.lholder, self.lpending = {}, []

    # --- plumbing -------------------------------------------------------
    def at(self, t, fn, *a):
        self.seq += 1
        heapq.heappush(self.ev, (t, self.seq, fn, a))

    def hop(self):
        return 0.5 * (1 + self.rng.uniform(-self.jitter, self.jitter))

    def node(self, k):
        return k % NODES

    def enqueue(self, k, w, gen):
        if w not in self.queue[k]:
            self.entry[(k, w)] = gen
        self.queue[k][w] = self.ticket(w)

    def ticket(self, w):
        return (self.req[w]['t0'], w)

    def strong(self, w):
        p = self.policy
        if p == 'strict':
            return True
        if p in ('age', 'giveback'):
            return self.now - self.req[w]['t0'] >= self.A
        if p == 'fails':
            return self.req[w].get('fails', 0) >= self.A
        if p == 'oracle':
            live = [x for x, r in self.req.items() if not r.get('granted')]
            return bool(live) and w == min(live, key=lambda x: self.req[x]['t0'])
        return False

    # --- client ---------------------------------------------------------
    def start(self, w):
        keys = sorted(self.rng.sample(range(self.N), self.K), key=lambda k: (self.node(k), k))
        self.req[w] = {'keys': keys, 't0': self.now, 'gen': 0, 'pending': None,
                       'handed': set(), 'last': {}, 'inflight': False, 'mine': set()}
        if self.policy == 'inproc':
            self.lpending.append(w)
            self.sweep()
            return
        self.attempt(w)

    def attempt(self, w):
        r = self.req[w]
        self.seq += 1
        r['gen'] = self.seq
        r['pending'] = None
        r['inflight'] = True
        r['replies'], r['sent'] = {}, self.now
        self.attempts += 1
        by = {}
        for k in r['keys']:
            by.setdefault(self.node(k), []).append(k)
        r['nodes'] = by
        for n, ks in by.items():
            self.at(self.now + self.c + self.hop(), self.srv_attempt, w, n, ks, r['gen'])
        self.arm_timer(w)

    def arm_timer(self, w):
        r = self.req[w]
        self.at(self.now + 40.0, self.timer, w, r['gen'])

    def timer(self, w, gen):
        r = self.req.get(w)
        if r and r['gen'] == gen and not r['inflight'] and r['pending'] is not None:
            self.timeouts += 1
            self.attempt(w)

    def on_reply(self, w, gen, n, res):
        r = self.req[w]
        if r['gen'] != gen:
            return
        r['replies'][n] = res
        if len(r['replies']) < len(r['nodes']):
            return
        r['inflight'] = False
        if all(x['ok'] for x in r['replies'].values()):
            self.granted(w)
            return
        # failed: give back what granted nodes took
        for n2, x in r['replies'].items():
            if x['ok']:
                self.at(self.now + self.c + self.hop(), self.srv_yield, w, n2, r['nodes'][n2])
        if self.policy == 'today':
            f = None
            for k in r['keys']:
                x = r['replies'][self.node(k)]
                if k not in x['held']:
                    f = k
                    break
            # trim above f (prefix kept); wait for f
            above = [k for k in r['keys'] if (self.node(k), k) > (self.node(f), f)]
            held_above = [k for k in above if k in r['replies'][self.node(k)]['held']]
            for n2 in set(self.node(k) for k in held_above):
                self.at(self.now + self.c + self.hop(), self.srv_release, w, n2,
                        [k for k in held_above if self.node(k) == n2])
            x = r['replies'][self.node(f)]
            if r['last'].get(f, -1) >= x['tserv']:
                self.attempt(w)
                return
            r['pending'] = {f}
            self.arm_timer(w)
            return
        r['fails'] = r.get('fails', 0) + 1
        if self.policy == 'coop':
            self.coop_reply(w, r)
            return
        conflicts = set()
        for x in r['replies'].values():
            conflicts |= set(x['conf'])
        # keys released/handed to us after the attempt reached their node
        pend = set()
        for k in conflicts:
            if r['last'].get(k, -1) < r['replies'][self.node(k)]['tserv']:
                pend.add(k)
        if self.policy == 'giveback' and r['handed'] and not self.strong(w):
            hs = r['handed']
            r['handed'] = set()
            for n2 in set(self.node(k) for k in hs):
                self.at(self.now + self.c + self.hop(), self.srv_giveback, w, n2,
                        [k for k in hs if self.node(k) == n2])
        if not pend:
            self.attempt(w)
            return
        r['pending'] = pend
        self.arm_timer(w)

    # --- coop: cooperative wound-wait, direct grant on the last hand-off -----
    def raise_floor(self, r, k, e):
        """A reply (or the waiter's own yield) says its entry in k's queue
        was created by call e: evidence from an older entry is stale."""
        fl = r.setdefault('floor', {})
        if e > fl.get(k, 0):
            fl[k] = e
        if self.seqrule is not None and r.setdefault('ev', {}).get(k, 0) < e:
            r['mine'].discard(k)
    def coop_reply(self, w, r):
        r['out'] = 0
        for n2, x in r['replies'].items():
            if x['ok']:
                r['out'] += 1
                self.seq += 1
                self.at(self.now + self.c + self.hop(), self.srv_convert, w, n2, r['nodes'][n2], r['gen'], self.seq)
            else:
                r['mine'] |= x['reserved']
                for k in x['reserved']:
                    r.setdefault('ev', {})[k] = r['gen']
                for k, e in x.get('entries', {}).items():
                    self.raise_floor(r, k, e)
        r['pending'] = set()
        for x in r['replies'].values():
            for k in x['conf']:
                if k not in r['mine']:
                    r['pending'].add(k)
        self.coop_check(w)

    def on_convert(self, w, gen, kept, lost, cgen=0):
        r = self.req[w]
        if r['gen'] != gen or r.get('granted'):
            return
        for k in lost:
            self.raise_floor(r, k, cgen)
        r['mine'] |= kept
        for k in kept:
            r.setdefault('ev', {})[k] = cgen
        r['pending'] |= {k for k in lost if k not in r['mine']}
        r['out'] -= 1
        self.coop_check(w)

    def coop_yield_requested(self, w):
        r = self.req[w]
        for k in list(r.get('yreq', ())):
            if k in r['mine']:
                r['yreq'].discard(k)
                r['mine'].discard(k)
                if r['pending'] is not None:
                    r['pending'].add(k)
                self.seq += 1
                self.raise_floor(r, k, self.seq)  # the yield's call creates the new entry
                self.at(self.now + self.c + self.hop(), self.srv_coop_yield, w, self.node(k), k, self.seq)

    def coop_check(self, w):
        r = self.req[w]
        self.coop_yield_requested(w)
        if r['inflight'] or r.get('out', 0) > 0 or r.get('granted') or r.get('confirming'):
            return
        if r['mine'] >= set(r['keys']):
            self.coop_grant(w)
        elif not r['pending']:
            self.attempt(w)

    def coop_grant(self, w):
        r = self.req[w]
        if self.confirm:
            # coop-confirm, what was built: the grant waits for a confirm
            # round (one call per node, all or nothing per call) that
            # turns the reservations into holds.
            r['confirming'], r['cok'] = len(r['nodes']), {}
            for n, ks in r['nodes'].items():
                self.at(self.now + self.c + self.hop(), self.srv_confirm_sync, w, n, ks)
            return
        for k in r['keys']:
            if not (self.resv.get(k) == w or self.holder.get(k) == w):
                self.violations += 1
        for n, ks in r['nodes'].items():     # background confirm: a call, no wait
            self.at(self.now + self.c + self.hop(), self.srv_confirm, w, n, ks)
        self.granted(w)

    def srv_confirm_sync(self, w, n, ks):
        self.calls += 1
        ok = all(self.holder.get(k) == w or (self.holder.get(k) is None and self.resv.get(k) == w) for k in ks)
        if ok:
            for k in ks:
                self.holder[k] = w
                self.resv.pop(k, None)
                self.queue[k].pop(w, None)
        self.at(self.now + self.hop(), self.on_confirm_sync, w, n, ks, ok)

    def on_confirm_sync(self, w, n, ks, ok):
        r = self.req[w]
        r['cok'][n] = ok
        r['confirming'] -= 1
        if r['confirming'] > 0:
            return
        if all(r['cok'].values()):
            self.granted(w)
            return
        self.cfails += 1
        for n2, ok2 in r['cok'].items():     # holds back to reservations
            if ok2:
                self.at(self.now + self.c + self.hop(), self.srv_yield, w, n2, r['nodes'][n2])
        r['mine'] = set()
        self.attempt(w)

    def srv_confirm(self, w, n, ks):
        if not self.lazy:
            self.calls += 1

    def srv_convert(self, w, n, ks, gen, cgen=0):
        self.calls += 1
        kept, lost = set(), set()
        for k in ks:
            if self.holder.get(k) != w:
                continue
            del self.holder[k]
            q = self.queue[k]
            if q and min(q.values()) < self.ticket(w):
                self.enqueue(k, w, cgen)
                self.free_key(k)
                lost.add(k)
            else:
                self.resv[k] = w
                kept.add(k)
        self.at(self.now + self.hop(), self.on_convert, w, gen, kept, lost, cgen)

    def srv_coop_yield(self, w, n, k, ygen=0):
        self.calls += 1
        if self.resv.get(k) == w and self.holder.get(k) is None:
            del self.resv[k]
            self.enqueue(k, w, ygen)
            self.free_key(k)

    def on_msg(self, w, k, kind, tserv, egen=0):
        self.msgs += 1
        if self.policy == 'coop':
            r = self.req.get(w)
            if r is None or r.get('granted') or k not in r['keys']:
                return
            if kind == 'h':
                if self.seqrule is None:
                    trust = self.resv.get(k) == w  # the oracle
                elif self.seqrule == 'floor':
                    trust = egen >= r.setdefault('floor', {}).get(k, 0)
                else:
                    trust = True
                if trust:
                    r.setdefault('ev', {})[k] = max(r.setdefault('ev', {}).get(k, 0), egen)
                    r['mine'].add(k)
                    if r['pending'] is not None:
                        r['pending'].discard(k)
                    self.coop_check(w)
            elif kind == 'y':
                r.setdefault('yreq', set()).add(k)
                self.coop_yield_requested(w)
            return
        r = self.req.get(w)
        if r is None or r.get('granted'):
            return
        if k not in r['keys']:
            return
        r['last'][k] = max(r['last'].get(k, -1), tserv)
        if kind == 'h':
            r['handed'].add(k)
        if r['pending'] is None or r['inflight']:
            return
        if self.policy == 'today':
            if k in r['pending'] and kind == 'r':
                r['pending'] = None
                self.at(self.now + self.c, self.attempt_if, w, r['gen'])
            return
        r['pending'].discard(k)
        if not r['pending']:
            r['pending'] = None
            self.at(self.now + self.c, self.attempt_if, w, r['gen'])

    def attempt_if(self, w, gen):
        r = self.req[w]
        if r['gen'] == gen and not r['inflight']:
            self.attempt(w)

    def granted(self, w):
        r = self.req[w]
        r['granted'] = True
        self.seq += 1
        r['gen'] = self.seq
        self.waits.append(self.now - r['t0'])
        # hold: release at once (after client overhead)
        by = r['nodes']
        r['rel_wait'] = len(by)
        for n, ks in by.items():
            self.at(self.now + self.c + self.hop(), self.srv_release, w, n, ks, True)

    def on_released(self, w):
        r = self.req[w]
        r['rel_wait'] -= 1
        if r['rel_wait'] == 0:
            self.done += 1
            if self.policy == 'inproc':
                for k in r['keys']:
                    del self.lholder[k]
            self.start(w)

    # --- server -----------------------------------------------------------
    def takeable(self, w, k):
        h = self.holder.get(k)
        if h is not None:
            return h == w
        v = self.resv.get(k)
        if v is None or v == w:
            return True
        return self.ticket(w) < self.ticket(v)   # wound a younger reservation

    def srv_attempt(self, w, n, ks, gen):
        self.calls += 1
        r = self.req[w]
        held, conf, freed = set(), [], set()
        if self.policy == 'today':
            for k in ks:
                if self.holder.get(k) in (None, w):
                    self.holder[k] = w
                    held.add(k)
                else:
                    conf.append(k)
                    self.subs[k].add(w)
                    break
            ok = not conf
            res = {'ok': ok, 'held': held, 'conf': conf, 'tserv': self.now, 'freed_since': freed}
            self.at(self.now + self.hop(), self.on_reply, w, gen, n, res)
            return
        if self.policy == 'coop':
            if all(self.holder.get(k) in (None, w) and self.resv.get(k) in (None, w) for k in ks):
                for k in ks:
                    self.holder[k] = w
                    self.resv.pop(k, None)
                    self.queue[k].pop(w, None)
                res = {'ok': True, 'conf': [], 'tserv': self.now, 'reserved': set()}
            else:
                mine = set()
                first = r['fails'] == 0 if 'fails' in r else True
                for k in ks:
                    h, v = self.holder.get(k), self.resv.get(k)
                    if h is None and v in (None, w):
                        if not self.nofree or v == w:
                            self.resv[k] = w
                            self.queue[k].pop(w, None)
                            mine.add(k)
                        else:
                            conf.append(k)
                            self.enqueue(k, w, gen)
                        continue
                    conf.append(k)
                    self.enqueue(k, w, gen)
                    if h is None and v is not None and self.ticket(w) < self.ticket(v):
                        self.at(self.now + self.hop(), self.on_msg, v, k, 'y', self.now)
                res = {'ok': False, 'conf': conf, 'tserv': self.now, 'reserved': mine,
                       'entries': {k: self.entry.get((k, w), 0) for k in conf}}
            self.at(self.now + self.hop(), self.on_reply, w, gen, n, res)
            return
        if all(self.takeable(w, k) for k in ks):
            for k in ks:
                self.holder[k] = w
                self.resv.pop(k, None)
                self.queue[k].pop(w, None)
            res = {'ok': True, 'conf': [], 'tserv': self.now}
        else:
            st = self.strong(w)
            for k in ks:
                if self.takeable(w, k):
                    if st and self.holder.get(k) is None:
                        self.resv[k] = w          # reserve (or wound) a free key
                        self.queue[k].pop(w, None)
                    continue
                conf.append(k)
                self.queue[k][w] = self.ticket(w)
            res = {'ok': False, 'conf': conf, 'tserv': self.now}
        self.at(self.now + self.hop(), self.on_reply, w, gen, n, res)

    def free_key(self, k):
        """k has no holder and no reservation now: hand off or wake."""
        q = self.queue[k]
        if not q:
            return
        p = self.policy
        h = min(q, key=lambda x: q[x])
        if p in ('strict', 'handoff', 'giveback', 'coop') or (p in ('age', 'fails', 'oracle') and self.strong(h)):
            del q[h]
            self.resv[k] = h
            self.at(self.now + self.hop(), self.on_msg, h, k, 'h', self.now, self.entry.pop((k, h), 0))
            return
        for x in list(q):
            self.at(self.now + self.hop(), self.on_msg, x, k, 'r', self.now)

    def srv_release(self, w, n, ks, final=False):
        self.calls += 1
        for k in ks:
            if self.policy == 'coop' and final and self.resv.get(k) == w and self.holder.get(k) is None:
                del self.resv[k]
                self.free_key(k)
                continue
            if self.holder.get(k) == w:
                del self.holder[k]
                if self.policy == 'today':
                    for x in self.subs[k]:
                        self.at(self.now + self.hop(), self.on_msg, x, k, 'r', self.now)
                    self.subs[k] = set()
                else:
                    self.free_key(k)
        if final:
            self.at(self.now + self.hop(), self.on_released, w)

    def srv_yield(self, w, n, ks):
        self.calls += 1
        if self.policy == 'today':
            return          # today keeps the prefix; trimming is done apart
        st = self.strong(w) or self.policy == 'coop'
        for k in ks:
            if self.holder.get(k) != w:
                continue
            del self.holder[k]
            q = self.queue[k]
            if st and not (q and min(q.values()) < self.ticket(w)):
                self.resv[k] = w
            else:
                self.free_key(k)

    def srv_giveback(self, w, n, ks):
        self.calls += 1
        for k in ks:
            if self.resv.get(k) == w and self.holder.get(k) is None:
                del self.resv[k]
                self.free_key(k)

    # --- inproc baseline -------------------------------------------------
    def sweep(self):
        reserved = set()
        for w in list(self.lpending):
            ks = self.req[w]['keys']
            if all(k not in self.lholder and k not in reserved for k in ks):
                for k in ks:
                    self.lholder[k] = w
                self.lpending.remove(w)
                self.inproc_lock(w)
            elif not reserved:
                reserved.update(ks)

    def inproc_lock(self, w):
        r = self.req[w]
        by = {}
        for k in r['keys']:
            by.setdefault(self.node(k), []).append(k)
        r['nodes'], r['replies'] = by, {}
        self.seq += 1
        r['gen'] = self.seq
        for n, ks in by.items():
            res = {'ok': True, 'conf': [], 'tserv': 0}
            self.calls += 1
            d = self.c + self.hop() + self.hop()
            self.at(self.now + d, self.on_reply, w, r['gen'], n, res)

    def run(self):
        for w in range(self.W):
            self.at(self.rng.uniform(0, 0.5), self.start, w)
        while self.ev:
            t, _, fn, a = heapq.heappop(self.ev)
            if t > self.horizon:
                break
            self.now = t
            fn(*a)
        ws = sorted(self.waits)
        p99 = ws[int(len(ws) * 0.99)] if ws else 0
        return dict(tput=self.done / self.horizon, p99=p99, mx=ws[-1] if ws else 0,
                    att=self.attempts / max(self.done, 1), to=self.timeouts,
                    msgs=self.msgs / max(self.done, 1), calls=self.calls / max(self.done, 1), viol=self.violations)


def main():
    horizon = float(sys.argv[1]) if len(sys.argv) > 1 else 4000.0
    print("%-14s %8s %8s %8s %8s %6s %6s %7s %7s" % ("policy", "b/RTT", "vs in", "p99", "max", "att/b", "msg/b", "calls/b", "cpu-vs"))
    base = None
    for name, pol, A in [("inproc", "inproc", 0), ("today", "today", 0), ("greedy", "greedy", 0),
                         ("strict", "strict", 0), ("handoff", "handoff", 0),
                         ("age:5", "age", 5), ("age:10", "age", 10), ("age:20", "age", 20),
                         ("fails:1", "fails", 1), ("fails:2", "fails", 2), ("fails:3", "fails", 3),
                         ("fails:5", "fails", 5), ("oracle", "oracle", 0), ("coop", "coop", 0),
                         ("coop-lazy", "coop", 'lazy'), ("coop-confirm", "coop", 'confirm'),
                         ("coop-seq", "coop", 'seq'), ("coop-naive", "coop", 'naive')]:
        kw = {}
        if A == 'confirm':
            kw, A = {'confirm': True}, 0
        elif A == 'lazy':
            kw, A = {'lazy': True}, 0
        elif A in ('seq', 'naive'):
            kw, A = {'lazy': True, 'seq': 'floor' if A == 'seq' else 'naive'}, 0
        elif A == 'nofree':
            kw, A = {'lazy': True, 'nofree': True}, 0
        rs = [Sim(pol, A, horizon=horizon, seed=s, **kw).run() for s in (1, 2, 3)]
        avg = {k: sum(r[k] for r in rs) / len(rs) for k in rs[0]}
        avg['mx'] = max(r['mx'] for r in rs)
        if base is None:
            base, basec = avg['tput'], avg['calls']
        print("%-14s %8.2f %8.2f %8.1f %8.1f %6.2f %6.1f %7.2f %7.2f timeouts=%d" % (
            name, avg['tput'], avg['tput'] / base, avg['p99'], avg['mx'], avg['att'], avg['msgs'],
            avg['calls'], basec / avg['calls'], sum(r['to'] for r in rs)) + (" VIOLATIONS=%d" % sum(r['viol'] for r in rs) if any(r['viol'] for r in rs) else ""))


if __name__ == '__main__' and len(sys.argv) <= 2:
    main()


class BigBatch(Sim):
    """One 1,000-key batch (worker 0, started at t=50) against 8 workers
    hammering the same 1,000 keys with batches of 1 to 5 keys."""

    def __init__(self, policy, **kw):
        super().__init__(policy, W=9, N=1000, **kw)
        self.big_wait = None

    def start(self, w):
        if w == 0:
            if self.big_wait is not None or self.now < 50:
                if self.now < 50:
                    self.at(50.0, self.start, 0)
                return
            keys = sorted(range(self.N), key=lambda k: (self.node(k), k))
        else:
            keys = sorted(self.rng.sample(range(self.N), 1 + self.rng.randrange(5)),
                          key=lambda k: (self.node(k), k))
        self.req[w] = {'keys': keys, 't0': self.now, 'gen': 0, 'pending': None,
                       'handed': set(), 'last': {}, 'inflight': False, 'mine': set()}
        if self.policy == 'inproc':
            self.lpending.append(w)
            self.sweep()
            return
        self.attempt(w)

    def granted(self, w):
        if w == 0:
            self.big_wait = self.now - self.req[0]['t0']
        super().granted(w)


def bigbatch():
    print("1,000-key batch against 8 processes of 1-5 key batches (wait in RTT)")
    for name, pol, kw in [("inproc", "inproc", {}), ("today", "today", {}), ("greedy", "greedy", {}),
                          ("strict", "strict", {}), ("coop-lazy", "coop", {'lazy': True}),
                          ("coop-confirm", "coop", {'confirm': True})]:
        ws = []
        for seed in range(1, 6):
            s = BigBatch(pol, horizon=3000.0, seed=seed, **kw)
            s.run()
            ws.append(s.big_wait)
        print("  %-10s %s" % (name, ["%.1f" % x if x is not None else "starved" for x in ws]))


if __name__ == '__main__' and len(sys.argv) > 2 and sys.argv[2] == 'big':
    bigbatch()


def shapes():
    print("other shapes (b/RTT, vs inproc, wait p99, max, calls/batch, cpu-vs)")
    for label, kw in [("K=1 over 1 key, W=16", dict(K=1, N=1)),
                      ("K=1 over 20 keys, W=16", dict(K=1, N=20)),
                      ("K=10 over 200, W=4", dict(W=4)),
                      ("K=100 over 1000, W=16", dict(K=100, N=1000))]:
        base = None
        for name, pol, extra in [("inproc", "inproc", {}), ("today", "today", {}),
                                 ("coop-lazy", "coop", {'lazy': True}),
                                 ("coop-confirm", "coop", {'confirm': True})]:
            rs = [Sim(pol, horizon=1500.0, seed=s, **kw, **extra).run() for s in (1, 2)]
            avg = {k: sum(r[k] for r in rs) / len(rs) for k in rs[0]}
            if base is None:
                base, basec = avg['tput'], avg['calls']
            print("  %-24s %-10s %6.2f %5.2f %7.1f %7.1f %6.2f %5.2f%s" % (
                label, name, avg['tput'], avg['tput'] / base, avg['p99'],
                max(r['mx'] for r in rs), avg['calls'], basec / avg['calls'],
                " VIOL" if any(r['viol'] for r in rs) else ""))


if __name__ == '__main__' and len(sys.argv) > 2 and sys.argv[2] == 'shapes':
    shapes()
