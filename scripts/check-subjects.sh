#!/usr/bin/env bash
# Fails when a commit subject is longer than SUBJECT_MAX characters (72):
# a subject is a title, the body says the rest.
#
# Which commits: those on top of the last release tag (v*), when there is
# one; without a tag, those committed at or after SUBJECT_SINCE (an ISO
# time in UTC, given by the Makefile), because the history before it has
# long subjects that cannot be rewritten. Committer time is compared, read
# in UTC, commit by commit (not git log --since, which can stop its walk at
# the first older commit it meets).
#
# In a shallow clone only the commits the clone has are checked: the tag
# may be outside it (then the SUBJECT_SINCE rule applies), and commits past
# the shallow boundary are not seen; the script says so and checks the rest.
# Outside a git work tree (a source archive) there is nothing to check.
set -euo pipefail
cd "$(dirname "$0")/.."

max="${SUBJECT_MAX:-72}"
since="${SUBJECT_SINCE:?SUBJECT_SINCE must name the cutoff, e.g. 2026-11-28T13:59:00Z}"

if ! git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
	echo "check-subjects: not a git work tree; nothing to check"
	exit 0
fi
if [ "$(git rev-parse --is-shallow-repository)" = true ]; then
	echo "check-subjects: shallow clone: only the commits it holds are checked"
fi

# %cd in format-local with TZ=UTC prints the committer time in UTC, so
# that it compares as a string with SUBJECT_SINCE.
fmt=(--date=format-local:%Y-%m-%dT%H:%M:%SZ --format=%cd%x09%h%x09%s)
if tag="$(git describe --tags --abbrev=0 --match 'v*' 2>/dev/null)"; then
	scope="commits on top of $tag"
	list="$(TZ=UTC git log "${fmt[@]}" "$tag..HEAD")"
	since="0000" # every commit of the range
else
	scope="commits since $since (no v* tag)"
	list="$(TZ=UTC git log "${fmt[@]}" HEAD)"
fi

# awk runs with LC_ALL=C so that every awk counts alike: bytes, less
# UTF-8 continuation bytes, which is characters for UTF-8 text.
printf '%s\n' "$list" | LC_ALL=C awk -F '\t' -v since="$since" -v max="$max" -v scope="$scope" '
	NF >= 3 && $1 >= since {
		subject = $0
		sub(/^[^\t]*\t[^\t]*\t/, "", subject)
		chars = subject
		gsub(/[\200-\277]/, "", chars)
		n++
		if (length(chars) > max) long[++b] = sprintf("  %s (%d chars) %s", $2, length(chars), subject)
	}
	END {
		if (b) {
			printf "check-subjects: subjects over %d characters, %s:\n", max, scope
			for (i = 1; i <= b; i++) print long[i]
			print "Shorten them (git rebase -i, reword) before they reach main; the body carries the rest."
			exit 1
		}
		printf "check-subjects: %d checked, none over %d characters (%s)\n", n, max, scope
	}'
