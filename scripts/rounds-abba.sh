#!/usr/bin/env bash
# rounds-abba.sh OLD NEW K N PAIRS: two builds of bench/cmd/rounds (e.g.
# before and after a change: `cd bench && go build -o /tmp/rounds-old
# ./cmd/rounds` on each commit) alternated against the devcluster of
# `make cluster-up`, in ABBA order so that a drift in load hits both; each
# run alternates the checked pipeline and slotlock for 4 rounds of N
# batches. Prints one line per run: slotlock / checked-pipeline (median of
# its rounds), then each contender's client and Redis CPU per batch.
set -euo pipefail
old=$1 new=$2 k=$3 n=$4 pairs=$5
addrs=$(cat "$(dirname "$0")/../.cache/devcluster.addrs")
echo "start $(date -u +%T) $(uptime | sed 's/.*load/load/')"
for i in $(seq 1 "$pairs"); do
  order="old new"
  if [ $((i % 2)) = 0 ]; then order="new old"; fi
  for side in $order; do
    bin=$old
    if [ "$side" = new ]; then bin=$new; fi
    out=$("$bin" -addrs "$addrs" -k "$k" -n "$n" -rounds 4 -contenders checked-pipeline,slotlock 2>&1)
    ratio=$(echo "$out" | awk '/^slotlock \/ checked-pipeline/ {print $4}')
    field() { echo "$out" | awk -v c="$1" -v f="$2" '$0 == c {on=1} on && $0 ~ f {print $4; exit}'; }
    echo "$side ratio $ratio slotlock-client $(field slotlock 'client CPU') checked-client $(field checked-pipeline 'client CPU') slotlock-redis $(field slotlock 'Redis CPU') checked-redis $(field checked-pipeline 'Redis CPU')"
  done
done
echo "end $(date -u +%T) $(uptime | sed 's/.*load/load/')"
