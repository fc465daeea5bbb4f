#!/usr/bin/env bash
# Makes sure the tests can get Redis. Both harness backends need the host's
# Redis binaries: the process backend runs redis-server, the docker backend
# builds its FROM-scratch image from redis-server and redis-cli when no Redis
# image is local (CI has no registry). Debian's redis-tools has both
# (its redis-check-rdb is redis-server under another name).
set -euo pipefail

have_server() {
	command -v redis-server >/dev/null 2>&1 ||
		command -v redis-check-rdb >/dev/null 2>&1 ||
		[ -x /usr/bin/redis-check-rdb ]
}
have_cli() {
	command -v redis-cli >/dev/null 2>&1 || [ -x /usr/bin/redis-cli ]
}

if have_server && have_cli; then
	exit 0
fi

if command -v apt-get >/dev/null 2>&1; then
	sudo=""
	if [ "$(id -u)" != 0 ]; then
		if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
			sudo="sudo -n"
		else
			sudo="none"
		fi
	fi
	if [ "$sudo" != none ]; then
		echo "ensure-redis: installing redis-tools with apt-get" >&2
		$sudo apt-get update -qq
		DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq redis-tools >/dev/null
		if have_server && have_cli; then
			exit 0
		fi
	fi
fi

cat >&2 <<'MSG'
ensure-redis: the tests need redis-server (or Debian's redis-check-rdb) and
redis-cli, and they could not be installed here (needs apt-get and root or
passwordless sudo). Install them, then run make test again:
  Debian/Ubuntu: sudo apt-get install redis-tools
  macOS:         brew install redis
MSG
exit 1
