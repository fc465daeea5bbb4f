#!/bin/sh
# The flake hunt (make flake): runs each package of FLAKE_PKGS FLAKE_COUNT
# times (go test -race -count=1, one package at a time) while a CPU hog
# keeps one core busy, so that a test which passes only on an idle machine
# fails here instead of on a newcomer's first make test. SLOTLOCK_CLUSTER
# picks the backend as for make test; FLAKE_RUN narrows the tests (a -run
# pattern). Prints per-package pass/fail counts; the log of every failed
# run stays in .cache/flake/, the logs of passed runs are removed.
set -u

go=${GO:-go}
pkgs=${FLAKE_PKGS:-. ./batch ./quorum ./cluster_test}
count=${FLAKE_COUNT:-5}
run=${FLAKE_RUN:-.}
timeout=${FLAKE_TIMEOUT:-20m}
dir=.cache/flake
mkdir -p "$dir"

# The hog: one busy shell loop, stopped on every way out (a failed run, an
# interrupt, the end).
sh -c 'while :; do :; done' &
hog=$!
trap 'kill "$hog" 2>/dev/null' EXIT
trap 'exit 130' INT TERM HUP

echo "flake hunt: packages [$pkgs] x $count, backend ${SLOTLOCK_CLUSTER:-auto}, hog pid $hog"
echo "load at start: $(cat /proc/loadavg 2>/dev/null || uptime)"

status=0
summary=""
for i in $(seq 1 "$count"); do
	for p in $pkgs; do
		name=$(echo "$p" | sed 's|^\./||; s|/|_|g; s|^\.$|root|')
		log="$dir/$name-${SLOTLOCK_CLUSTER:-auto}-$i.log"
		start=$(date +%s)
		if $go test -race -count=1 -timeout "$timeout" -run "$run" "$p" >"$log" 2>&1; then
			res=pass
			rm -f "$log"
		else
			res=FAIL
			status=1
		fi
		echo "run $i $p: $res ($(($(date +%s) - start)) s)"
		if [ "$res" = FAIL ]; then
			grep -E '^\s*--- FAIL|^(panic|FAIL)|_test\.go:[0-9]+:' "$log" | head -20 | sed 's/^/    /'
			echo "    log: $log"
		fi
		summary="$summary$p $res
"
	done
done

echo "load at end: $(cat /proc/loadavg 2>/dev/null || uptime)"
echo "per package (pass/fail of $count):"
for p in $pkgs; do
	ok=$(printf '%s' "$summary" | grep -cxF "$p pass")
	bad=$(printf '%s' "$summary" | grep -cxF "$p FAIL")
	echo "  $p: $ok pass, $bad fail"
done
exit $status
