#!/usr/bin/env bash
# test-servers.sh: builds the servers whose sources sit beside the
# repository (../shared/servers in CI: Valkey 8.0.1 and Redis 7.4.1, which
# Debian does not package) and runs make test-server against each. Builds
# are kept in .cache/servers/ and reused. A failure on any server fails the
# run, after every server has run. Where the sources are absent (a user's
# clone) it says so and does nothing, except under CI=true, where their
# absence fails the run: CI must test these servers.
#
#   SERVERS_DIR  where the sources and their build.sh are (../shared/servers)
#   SERVERS      which to build and test ("valkey-8.0.1 redis-7.4.1")
set -euo pipefail
cd "$(dirname "$0")/.."

dir=${SERVERS_DIR:-../shared/servers}
names=${SERVERS:-valkey-8.0.1 redis-7.4.1}

if [ ! -x "$dir/build.sh" ]; then
	if [ "${CI:-}" = true ]; then
		echo "test-servers: no $dir/build.sh: under CI=true the extra servers must be tested" >&2
		exit 1
	fi
	echo "test-servers: no $dir/build.sh (server sources beside the repository), skipped"
	exit 0
fi

# The build needs a C toolchain, and OpenSSL's headers for TLS, which
# TestTLSAndACL needs of the server (build.sh leaves TLS out without them).
# CI runs as root on Debian.
need=""
command -v cc >/dev/null 2>&1 && command -v make >/dev/null 2>&1 || need=" build-essential"
[ -f /usr/include/openssl/ssl.h ] || need="$need libssl-dev"
if [ -n "$need" ]; then
	sudo=""
	[ "$(id -u)" = 0 ] || sudo="sudo -n"
	echo "test-servers: installing$need with apt-get" >&2
	$sudo apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq $need >/dev/null
fi

cache="$(pwd -P)/.cache/servers"
mkdir -p "$cache"
failed=""
for name in $names; do
	t0=$SECONDS
	# The ceiling keeps the servers' build from reading this repository's
	# git state (their version header would name our commit as theirs).
	if ! out=$(GIT_CEILING_DIRECTORIES="$cache" "$dir/build.sh" "$name" "$cache/$name"); then
		echo "test-servers: $name: build failed" >&2
		failed="$failed $name(build)"
		continue
	fi
	bin=$(printf '%s\n' "$out" | tail -n 1)
	echo "test-servers: $name built in $((SECONDS - t0)) s: $bin"
	t1=$SECONDS
	if make --no-print-directory test-server SERVER="$bin"; then
		echo "test-servers: $name passed in $((SECONDS - t1)) s"
	else
		echo "test-servers: $name FAILED after $((SECONDS - t1)) s" >&2
		failed="$failed $name"
	fi
done
if [ -n "$failed" ]; then
	echo "test-servers: failed on:$failed" >&2
	exit 1
fi
