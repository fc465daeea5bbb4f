"""Discrete-event model of the in-process queue's scheduling policies.

Run:  python3 docs/models/localq.py

16 workers loop forever: draw 10 of 200 keys, get them from the queue,
hold them for a time T (fixed, or exponential with mean 1), release. The
model reports batches per unit of time (throughput), and the 99th
percentile and maximum of the waits, for:

  prefix        keys taken in canonical order, first come first served per
                key, a waiter holding the keys below the one it waits for
                (slotlock's first design)
  greedy        a batch is granted when all its keys are free, waiters
                checked oldest first; nobody is protected (can starve)
  oldest        greedy, but the oldest waiter's keys are reserved for it
                (slotlock's design since 2235d7c)
  old>=A        greedy, but every waiter older than A reserves its keys

It models the queue alone: no Redis, no CPU contention.
"""
import heapq
import random
from collections import deque


def run(policy, age=None, expo=False, W=16, K=10, N=200, horizon=20000.0, seed=1):
    rng = random.Random(seed)
    events, waits, done = [], [], 0
    holder = {}                      # key -> worker
    queues = {k: deque() for k in range(N)}   # prefix policy: waiters per key
    req = {}                         # worker -> [keys, start, next index]
    pending = []                     # other policies: waiters, oldest first

    def hold_time():
        return rng.expovariate(1.0) if expo else 1.0

    def grant(w, now):
        waits.append(now - req[w][1])
        heapq.heappush(events, (now + hold_time(), w))

    def progress(w, now):            # prefix policy
        ks, i = req[w][0], req[w][2]
        while i < len(ks):
            k = ks[i]
            if k not in holder and not queues[k]:
                holder[k] = w
                i += 1
            else:
                queues[k].append(w)
                req[w][2] = i
                return
        req[w][2] = i
        grant(w, now)

    def sweep(now):                  # the other policies
        reserved = set()
        for w in list(pending):
            ks = req[w][0]
            if all(k not in holder and k not in reserved for k in ks):
                for k in ks:
                    holder[k] = w
                pending.remove(w)
                grant(w, now)
            elif policy == "oldest" and not reserved:
                reserved.update(ks)
            elif policy == "old" and now - req[w][1] >= age:
                reserved.update(ks)

    def start(w, now):
        req[w] = [sorted(rng.sample(range(N), K)), now, 0]
        if policy == "prefix":
            progress(w, now)
        else:
            pending.append(w)

    for w in range(W):
        start(w, 0.0)
    if policy != "prefix":
        sweep(0.0)
    now = 0.0
    while now < horizon:
        now, w = heapq.heappop(events)
        done += 1
        for k in req[w][0]:
            del holder[k]
        if policy == "prefix":
            woken = []
            for k in req[w][0]:
                if queues[k]:
                    n = queues[k].popleft()
                    holder[k] = n
                    req[n][2] += 1
                    woken.append(n)
            for n in woken:
                progress(n, now)
        start(w, now)
        if policy != "prefix":
            sweep(now)
    waits.sort()
    return done / horizon, waits[int(len(waits) * 0.99)], waits[-1]


if __name__ == "__main__":
    for expo in (False, True):
        print("hold time", "exponential, mean 1" if expo else "fixed 1")
        print("  %-10s %12s %8s %8s" % ("policy", "batches/T", "wait p99", "max"))
        for name, policy, age in [("prefix", "prefix", None), ("greedy", "greedy", None),
                                  ("oldest", "oldest", None), ("old>=2", "old", 2.0),
                                  ("old>=5", "old", 5.0), ("old>=10", "old", 10.0)]:
            tput, p99, mx = run(policy, age, expo)
            print("  %-10s %12.2f %8.1f %8.1f" % (name, tput, p99, mx))
