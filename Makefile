# Targets for developers and CI. Tests run against a real Redis Cluster that
# internal/redistest starts per test package: in containers when a Docker
# engine answers, else as local processes (SLOTLOCK_CLUSTER=docker|process
# forces one).

GO          ?= go
PKGS        ?= ./...
TEST_FLAGS  ?= -race -count=1 -timeout 20m
# staticcheck 2026.2.2: the first release line that understands Go 1.26.
STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2
STATE       := .cache
# Modules of their own whose vet, lint and tests run with the library's:
# slotlockotel (the OpenTelemetry adapter) keeps OpenTelemetry out of the
# library's go.mod. (bench/, also a module, is tested by test below.)
ADAPTERS    ?= slotlockotel
# Commit subjects are at most 72 characters (scripts/check-subjects.sh, run
# by lint): checked for the commits on top of the last v* tag, or, with no
# tag yet, for commits at or after SUBJECT_SINCE (committer time, UTC),
# where the rule began; the history before it has long subjects that
# cannot be rewritten.
SUBJECT_SINCE ?= 2026-11-28T13:59:00Z

.PHONY: all test test-docker test-process ensure-redis vet lint bench cluster-up cluster-down

all: lint test

ensure-redis:
	@scripts/ensure-redis.sh

vet:
	$(GO) vet $(PKGS)
	@for m in $(ADAPTERS); do (cd $$m && $(GO) vet ./...) || exit 1; done

# The bench module's own tests (its contenders prove their holds, the
# observer, the cross-process check, -addrs mode) run with the library's:
# they are not reached by ./... from here.
test: ensure-redis vet
	$(GO) test $(TEST_FLAGS) $(PKGS)
	$(GO) test -count=1 -run 'Allocation' .  # alloc_norace_test.go: counts need a build without -race
	cd bench && $(GO) vet ./... && $(GO) test $(TEST_FLAGS) ./...
	@for m in $(ADAPTERS); do echo "cd $$m && $(GO) test $(TEST_FLAGS) ./..."; (cd $$m && $(GO) test $(TEST_FLAGS) ./...) || exit 1; done

test-docker:
	SLOTLOCK_CLUSTER=docker $(MAKE) test

test-process:
	SLOTLOCK_CLUSTER=process $(MAKE) test

lint:
	@SUBJECT_SINCE=$(SUBJECT_SINCE) scripts/check-subjects.sh
	@out="$$(gofmt -l .)"; if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)
	$(GO) run $(STATICCHECK) $(PKGS)
	@for m in $(ADAPTERS); do (cd $$m && $(GO) vet ./... && $(GO) run $(STATICCHECK) ./...) || exit 1; done

# The benchmark suite (bench/, a module of its own so that the peer
# libraries stay out of go.mod): slotlock against sequential SET NX,
# redsync, rueidislock, redislock and a raw pipeline, on one 3+3 cluster,
# plus the slot package's micro-benchmarks. bench writes docs/benchmarks.md
# and docs/benchmarks/ (it stops itself at 11m30s on 2 cores); bench-short
# is the CI smoke run (bounded at 4 min) and writes bench/out/ instead.
# Both run the cluster as processes unless SLOTLOCK_CLUSTER says otherwise
# (bench/cmd/slotbench/env.go, benchBackend: why).
.PHONY: bench-short
bench: ensure-redis
	cd bench && $(GO) run ./cmd/slotbench

bench-short: ensure-redis
	cd bench && SLOTLOCK_BENCH_SHORT=1 $(GO) run ./cmd/slotbench

# A cluster for manual use that stays up until cluster-down. Its addresses
# are in .cache/devcluster.addrs (comma separated), e.g.
#   redis-cli -c -p "$$(cut -d, -f1 .cache/devcluster.addrs | cut -d: -f2)"
# DEVCLUSTER_FLAGS="-backend docker" picks the other backend.
cluster-up: ensure-redis
	@mkdir -p $(STATE)
	@if [ -f $(STATE)/devcluster.pid ] && kill -0 "$$(cat $(STATE)/devcluster.pid)" 2>/dev/null; then \
		echo "devcluster already running: $$(cat $(STATE)/devcluster.addrs 2>/dev/null)"; exit 0; \
	fi; \
	$(GO) build -o $(STATE)/devcluster ./internal/redistest/cmd/devcluster || exit 1; \
	rm -f $(STATE)/devcluster.addrs $(STATE)/devcluster.pid; \
	nohup $(STATE)/devcluster -state $(STATE) $(DEVCLUSTER_FLAGS) >$(STATE)/devcluster.log 2>&1 & \
	pid=$$!; \
	for i in $$(seq 1 600); do \
		if [ -f $(STATE)/devcluster.addrs ]; then echo "devcluster up (pid $$pid): $$(cat $(STATE)/devcluster.addrs)"; exit 0; fi; \
		if ! kill -0 $$pid 2>/dev/null; then echo "devcluster failed:"; cat $(STATE)/devcluster.log; exit 1; fi; \
		sleep 0.1; \
	done; \
	echo "devcluster not ready after 60 s; see $(STATE)/devcluster.log"; kill $$pid; exit 1

cluster-down:
	@if [ ! -f $(STATE)/devcluster.pid ]; then echo "no devcluster running"; exit 0; fi; \
	pid="$$(cat $(STATE)/devcluster.pid)"; \
	kill -TERM "$$pid" 2>/dev/null || true; \
	for i in $$(seq 1 300); do kill -0 "$$pid" 2>/dev/null || { echo "devcluster stopped"; exit 0; }; sleep 0.1; done; \
	echo "devcluster (pid $$pid) did not stop in 30 s"; exit 1

# The flake hunt: each package of FLAKE_PKGS run FLAKE_COUNT times (-race,
# -count=1) while a CPU hog it starts and stops keeps one core busy, on the
# backend SLOTLOCK_CLUSTER picks; pass/fail per package, failed runs' logs
# kept in .cache/flake/. E.g. make flake FLAKE_PKGS='. ./batch' FLAKE_COUNT=5
# SLOTLOCK_CLUSTER=process (scripts/flake.sh; FLAKE_RUN narrows the tests).
FLAKE_PKGS  ?= . ./batch ./quorum ./cluster_test
FLAKE_COUNT ?= 5
FLAKE_RUN   ?= .

.PHONY: flake
flake: ensure-redis
	@GO='$(GO)' FLAKE_PKGS='$(FLAKE_PKGS)' FLAKE_COUNT='$(FLAKE_COUNT)' FLAKE_RUN='$(FLAKE_RUN)' scripts/flake.sh

# The fault suite (cluster_test) at length: every scenario runs longer and
# more often than the short run that `make test` includes (SLOTLOCK_CHAOS=long),
# bounded by CHAOS_TIMEOUT. The full log goes to .cache/chaos.log and one
# JSON line per scenario to .cache/chaos-report.jsonl, the source of the
# table in docs/faults.md. SLOTLOCK_CLUSTER picks the backend as for test;
# CHAOS_RUN narrows the scenarios (a -run pattern).
CHAOS_TIMEOUT ?= 60m
CHAOS_RUN     ?= .

.PHONY: chaos
chaos: ensure-redis
	@mkdir -p $(STATE); rm -f $(STATE)/chaos-report.jsonl
	@echo "fault suite, long run: log in $(STATE)/chaos.log"
	@SLOTLOCK_CHAOS=long SLOTLOCK_CHAOS_REPORT="$(CURDIR)/$(STATE)/chaos-report.jsonl" \
		$(GO) test -race -count=1 -v -timeout $(CHAOS_TIMEOUT) -run '$(CHAOS_RUN)' ./cluster_test >$(STATE)/chaos.log 2>&1; \
	status=$$?; \
	grep -E '^(--- |    --- |ok|FAIL)|chaos report' $(STATE)/chaos.log; \
	exit $$status

# The soak: the fault suite's faults in rotation (a holder process killed,
# a master killed, a master frozen past the node timeout, a master paused
# past the TTL, slot moves), 20 s per round over the same Lockers, until
# SOAK_GRANTS grants have been checked by the history checker, or it fails
# at SOAK_LIMIT. Not part of CI or make test. It runs without the race
# detector by default (it costs several times the grant rate; the fault
# suite in make test runs with it): SOAK_FLAGS=-race to add it. Log in
# .cache/soak.log, report line in .cache/soak-report.jsonl.
SOAK_GRANTS ?= 1000000
SOAK_LIMIT  ?= 60m
SOAK_FLAGS  ?=

.PHONY: soak
soak: ensure-redis
	@mkdir -p $(STATE); rm -f $(STATE)/soak-report.jsonl
	@echo "soak until $(SOAK_GRANTS) grants are checked (at most $(SOAK_LIMIT)): log in $(STATE)/soak.log"
	@SLOTLOCK_SOAK=$(SOAK_GRANTS) SLOTLOCK_SOAK_LIMIT=$(SOAK_LIMIT) SLOTLOCK_CHAOS_REPORT="$(CURDIR)/$(STATE)/soak-report.jsonl" \
		$(GO) test $(SOAK_FLAGS) -count=1 -v -timeout 90m -run '^TestSoak$$' ./cluster_test >$(STATE)/soak.log 2>&1; \
	status=$$?; \
	grep -E '^(--- |ok|FAIL)|soak round|chaos report' $(STATE)/soak.log; \
	exit $$status

# The suite against another server (docs/compatibility.md): the packages
# that exercise the protocol and the server-specific paths (slot map,
# failover, ASK, transactions) and the fault scenarios of cluster_test
# that fit CI's time, on the process backend, against the server binary
# SERVER names (a path, or a name on PATH):
#   make test-server SERVER=/path/to/valkey-server
# test-servers builds the servers whose sources sit beside the repository
# (../shared/servers in CI: Valkey 8.0.1, Redis 7.4.1) into .cache/servers
# and runs test-server against each (scripts/test-servers.sh); without
# those sources it says so and does nothing, except under CI=true.
SERVER        ?=
SERVER_PKGS   ?= . ./batch ./pipeline ./quorum ./internal/topology ./internal/tracking
# The fault scenarios: failover (CLUSTER SHARDS after it differs per
# server), pause, resharding and every migrating-slot test (ASK), shared
# holds through faults, quorum, a client paused at its grant and past its
# TTL. About 4 minutes on 2 cores.
SERVER_FAULTS ?= ^(TestAPausedGranteeKeepsItsKeys|TestAHolderPausedPastItsTTL|TestMasterFailover|TestLockAfterFailover|TestFencingAcrossFailover|TestMasterPaused|TestColdScriptCache|TestReshardingUnderLoad|TestSharedHoldsThroughFaults|TestQuorumUnderFaults)$$|Migrating

.PHONY: test-server test-servers
test-server:
	@if [ -z "$(SERVER)" ]; then echo "usage: make test-server SERVER=/path/to/redis-or-valkey-server"; exit 2; fi
	@"$$(command -v '$(SERVER)' || echo '$(SERVER)')" --version
	@status=0; \
	echo "SLOTLOCK_CLUSTER=process SLOTLOCK_REDIS_SERVER=$(SERVER) $(GO) test $(TEST_FLAGS) $(SERVER_PKGS)"; \
	SLOTLOCK_CLUSTER=process SLOTLOCK_REDIS_SERVER='$(SERVER)' $(GO) test $(TEST_FLAGS) $(SERVER_PKGS) || status=1; \
	echo "SLOTLOCK_CLUSTER=process SLOTLOCK_REDIS_SERVER=$(SERVER) $(GO) test $(TEST_FLAGS) -run '$(SERVER_FAULTS)' ./cluster_test"; \
	SLOTLOCK_CLUSTER=process SLOTLOCK_REDIS_SERVER='$(SERVER)' $(GO) test $(TEST_FLAGS) -run '$(SERVER_FAULTS)' ./cluster_test || status=1; \
	exit $$status

test-servers:
	@scripts/test-servers.sh
