#!/usr/bin/env bash
# xproc-abba.sh OLD NEW PAIRS [XPROC FLAGS...]: two builds of
# bench/cmd/xproc (e.g. before and after a change: `cd bench && go build
# -o /tmp/xproc-old ./cmd/xproc` on each commit) alternated against the
# devcluster of `make cluster-up`, in ABBA order so that a drift in load
# hits both. Each pair runs both with the same flags (e.g. -procs 4 -w 16
# -rtt 1ms -d 3s). Prints one line per run: the side and xproc's summary
# (batches/s, wait p99, longest wait), then per side the median and range
# of batches/s and wait p99.
set -euo pipefail
old=$1 new=$2 pairs=$3
shift 3
addrs=$(cat "$(dirname "$0")/../.cache/devcluster.addrs")
echo "start $(date -u +%T) $(uptime | sed 's/.*load/load/') flags: $*"
out=$(mktemp)
for i in $(seq 1 "$pairs"); do
  order="old new"
  if [ $((i % 2)) = 0 ]; then order="new old"; fi
  for side in $order; do
    bin=$old
    if [ "$side" = new ]; then bin=$new; fi
    line=$("$bin" -addrs "$addrs" "$@" 2>&1 | grep '^batches' | tail -1)
    echo "$side $line" | tee -a "$out"
  done
done
# median (range) of a column of numbers
med() { sort -g | awk '{v[NR]=$1} END {printf "%s (%s-%s)", v[int((NR+1)/2)], v[1], v[NR]}'; }
for side in old new; do
  rate=$(grep "^$side " "$out" | sed -E 's/.*\(([0-9.]+)\/s\).*/\1/' | med)
  p99=$(grep "^$side " "$out" | sed -E 's/.*wait p99 ([0-9.]+)(µs|ms).*/\1 \2/' |
    awk '{print ($2 == "µs") ? $1 / 1000 : $1}' | med)
  echo "$side: batches/s median $rate, wait p99 ms median $p99, $(grep -c "^$side " "$out") runs"
done
rm -f "$out"
echo "end $(date -u +%T) $(uptime | sed 's/.*load/load/')"
