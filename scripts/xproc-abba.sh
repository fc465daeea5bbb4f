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
for side in old new; do
  grep "^$side " "$out" | sed -E 's/.*\(([0-9.]+)\/s\).*wait p99 ([0-9.]+)(µs|ms).*longest ([0-9.]+)(µs|ms).*/\1 \2\3 \4\5/' |
    awk -v s="$side" '{
      b[NR]=$1; p=$2; u=p; sub(/[0-9.]+/,"",u); sub(/[^0-9.]+$/,"",p); w[NR]=(u=="µs")?p/1000:p
    } END {
      n=asort(b); m=asort(w)
      printf "%s: batches/s median %s (%s-%s), wait p99 median %.1f ms (%.1f-%.1f), %d runs\n", s, b[int((n+1)/2)], b[1], b[n], w[int((m+1)/2)], w[1], w[m], n
    }'
done
rm -f "$out"
echo "end $(date -u +%T) $(uptime | sed 's/.*load/load/')"
