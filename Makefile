# pgq — consumer-group fan-out for PostgreSQL. `make help` lists the targets.
SHELL := /bin/bash
GO    ?= go
BIN   := bin/pgq-scheduler
# Ports of the throwaway clusters (127.0.0.1 only). The extra ones of
# `make test` follow TEST_PORT unless set: RESTART_PORT (TestDatabaseRestart's
# second cluster), CRON_PORT (the pg_cron cluster), PGBOUNCER_PORT (PgBouncer
# in front of the test cluster), TWOPC_PORT (the cluster of the specs that
# prepare transactions, when the server has max_prepared_transactions = 0).
TEST_PORT      ?= 25433
RUN_PORT       ?= 25432
BENCH_PORT     ?= 25434
BENCH_LT_PORT  ?= 25439
RESTART_PORT   ?= $(shell expr $(TEST_PORT) + 8)
CRON_PORT      ?= $(shell expr $(TEST_PORT) + 9)
PGBOUNCER_PORT ?= $(shell expr $(TEST_PORT) + 10)
TWOPC_PORT     ?= $(shell expr $(TEST_PORT) + 7)
CHAOS_PORT     ?= 25435
CHAOS_FAILOVER_PORT ?= 25436
# make chaos's move scenario: two shard clusters (this port and the next).
CHAOS_MOVE_PORT ?= 25470
# TestChaosShort's clusters (this port and the next).
CHAOS_CI_PORT  ?= $(shell expr $(TEST_PORT) + 11)
# TestStaleAckAfterAsyncFailover's primary and standby (this port and the next).
FAILOVER_PORT  ?= $(shell expr $(TEST_PORT) + 13)
# The backup/restore and uninstall test's second cluster (after FAILOVER_PORT's two).
BACKUP_PORT    ?= $(shell expr $(TEST_PORT) + 15)
# The shards test's two clusters (this port and the next): tests/shards_test.go.
SHARDS_TEST_PORT ?= $(shell expr $(TEST_PORT) + 20)
# make shards: the directory cluster on this port, the four shard clusters on the next four.
SHARDS_PORT    ?= 25460
# The relay tests' NATS servers (nats-server, JetStream): NATS_PORT and NATS_PORT + 1.
NATS_PORT      ?= $(shell expr $(TEST_PORT) + 57)
LISTEN         ?= 127.0.0.1:9187

.PHONY: all help build run test lint deps bench bench-quick bench-lt chaos ha shards verify-sql snapshot-sql gen-upgrade upgrade-test db-stop clean

all: build

help: ## list the targets and the variables they take
	@echo "make TARGET [VAR=value ...]"
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed -E 's/^([a-z-]+):.*## (.*)/  \1\t\2/' | expand -t 16
	@echo "variables: TEST_PORT=$(TEST_PORT) RUN_PORT=$(RUN_PORT) BENCH_PORT=$(BENCH_PORT) RESTART_PORT=$(RESTART_PORT)"
	@echo "           CRON_PORT=$(CRON_PORT) PGBOUNCER_PORT=$(PGBOUNCER_PORT) TWOPC_PORT=$(TWOPC_PORT) BACKUP_PORT=$(BACKUP_PORT)"
	@echo "           FAILOVER_PORT=$(FAILOVER_PORT) LISTEN=$(LISTEN) DATABASE_URL=<server>"

# The version stamped into the binary: v<VERSION>, plus +<commit> unless the
# checkout is the release's tag (docs/releases.md).
PGQ_VERSION = v$(shell cat VERSION)$(shell git describe --tags --exact-match --match 'v[0-9]*' >/dev/null 2>&1 || git rev-parse --short=12 HEAD 2>/dev/null | sed 's/^/+/')

build: ## build bin/pgq-scheduler (version from VERSION, see `bin/pgq-scheduler version`)
	$(GO) build -ldflags "-X main.version=$(PGQ_VERSION)" -o $(BIN) ./cmd/pgq-scheduler

# With DATABASE_URL set, run against it; otherwise start the embedded default.
run: build ## throwaway PostgreSQL + migrations + pgq-scheduler run (metrics on LISTEN)
	@set -e; \
	listen='$(LISTEN)'; host=$${listen%:*}; port=$${listen##*:}; \
	if [ -n "$$listen" ] && (exec 3<>"/dev/tcp/$${host:-127.0.0.1}/$$port") 2>/dev/null; then \
	  echo "pgq: $(LISTEN) is already in use (another make run?); pick another: make run LISTEN=127.0.0.1:9188" >&2; \
	  exit 1; \
	fi; \
	if [ -z "$$DATABASE_URL" ]; then \
	  DATABASE_URL=$$(scripts/devdb.sh start run $(RUN_PORT)); \
	fi; \
	export DATABASE_URL; \
	$(BIN) migrate; \
	echo "pgq: throwaway PostgreSQL at $$DATABASE_URL (stop it with: make db-stop)"; \
	echo "pgq: psql \"$$DATABASE_URL\""; \
	echo "pgq: console: http://$(LISTEN)/  (read-only unless PGQ_CONSOLE_ADMIN=true PGQ_CONSOLE_TOKEN=...)"; \
	echo "pgq: metrics and health: http://$(LISTEN)/metrics  http://$(LISTEN)/healthz"; \
	echo "pgq: status: DATABASE_URL=\"$$DATABASE_URL\" $(BIN) status"; \
	exec $(BIN) run --listen $(LISTEN)

# Everything, also after a failure: the test databases are dropped at the end
# (scripts/test-cleanup.sh), so a shared DATABASE_URL server stays clean.
test: build ## lint + Go tests + psql walkthrough + Python/Node examples + pg_cron (own cluster) + PgBouncer + promtool
	@set -e; \
	if [ -z "$$DATABASE_URL" ]; then DATABASE_URL=$$(scripts/devdb.sh start test $(TEST_PORT)); fi; \
	export DATABASE_URL PGQ_TEST_RESTART_PORT=$(RESTART_PORT) PGQ_TEST_PGBOUNCER_PORT=$(PGBOUNCER_PORT) \
	  PGQ_TEST_CHAOS_PORT=$(CHAOS_CI_PORT) PGQ_TEST_TWOPC_PORT=$(TWOPC_PORT) PGQ_TEST_NOT_RUN=$(CURDIR)/.pgq-dev/not-run.log \
	  PGQ_TEST_FAILOVER_PORT=$(FAILOVER_PORT) PGQ_TEST_BACKUP_PORT=$(BACKUP_PORT) PGQ_TEST_NATS_PORT=$(NATS_PORT) \
	  PGQ_TEST_SHARDS_PORT=$(SHARDS_TEST_PORT); \
	trap 'scripts/test-cleanup.sh "$$DATABASE_URL" || true' EXIT; \
	scripts/deps.sh ensure pg_cron pgbouncer psycopg node promtool nats plproxy || { \
	  echo "make test: a component the suite exercises is missing (see above): run 'sudo make deps', then make test" >&2; \
	  exit 1; }; \
	mkdir -p .pgq-dev; rm -f .pgq-dev/not-run.log; \
	tests/pg_cron.sh $(CRON_PORT) >.pgq-dev/pg_cron.log 2>&1 & cron=$$!; \
	fail=0; \
	scripts/lint.sh || fail=1; \
	$(GO) test -count=1 -timeout 20m ./... || fail=1; \
	tests/e2e_psql.sh || fail=1; \
	tests/examples.sh || fail=1; \
	deploy/check.sh || fail=1; \
	wait $$cron && cat .pgq-dev/pg_cron.log || { cat .pgq-dev/pg_cron.log; fail=1; }; \
	if [ -s .pgq-dev/not-run.log ]; then \
	  echo "################################################################################" >&2; \
	  echo "make test: NOT RUN (each line says why):" >&2; cat .pgq-dev/not-run.log >&2; \
	  echo "################################################################################" >&2; \
	fi; \
	if [ $$fail != 0 ]; then echo "make test: FAILED (see above)" >&2; exit 1; fi; \
	echo "make test: all passed"

lint: ## go vet + staticcheck (pinned version, via go run)
	scripts/lint.sh

deps: ## install what make test exercises: pg_cron, PgBouncer, psycopg, Node pg, promtool, nats-server, PL/Proxy (as root)
	scripts/deps.sh ensure pg_cron pgbouncer psycopg node promtool nats plproxy

# On its own cluster the bench installs Skytools PgQ (Debian's
# postgresql-<major>-pgq3, as root) for its PgQ baseline; without it those
# rows say "not measured" and the table's header says why. Its cluster's
# shared memory is in 2 MB huge pages where the kernel has them (as root the
# cluster reserves them: scripts/devdb.sh, DEVDB_HUGEPAGES); the header says
# which. Why it matters for many consumers: docs/architecture.md, "Member storm".
bench: build ## benchmarks (≈20 min), as ratios to baselines measured in the same run, PgQ among them
	@set -e; \
	if [ -z "$$DATABASE_URL" ]; then \
	  DATABASE_URL=$$(DEVDB_HUGEPAGES=1 scripts/devdb.sh start bench $(BENCH_PORT)); \
	  scripts/deps.sh ensure pgq3 || echo "make bench: PgQ could not be installed; its rows are reported as not measured" >&2; \
	fi; \
	export DATABASE_URL; \
	$(GO) run ./bench $(BENCH_FLAGS)

bench-quick: ## a shorter benchmark run (a few minutes)
	$(MAKE) bench BENCH_FLAGS=-quick

# The LT matrix at the seed's rates (≈50 min): per row, the highest publish
# rate at which every seed threshold holds (bench/lt.go; LT_* variables in
# docs/benchmarks.md). Its own durable cluster, with pg_stat_statements for
# the server-side fetch figures; maintenance by the sidecar (make build).
bench-lt: build ## the pre-GA LT matrix at the seed's rates (≈50 min): bench/results-lt.json and .svg
	@set -e; \
	if [ -z "$$DATABASE_URL" ]; then \
	  DATABASE_URL=$$(DEVDB_OPTS="-c shared_preload_libraries=pg_stat_statements" scripts/devdb.sh start benchlt $(BENCH_LT_PORT)); \
	fi; \
	export DATABASE_URL; \
	$(GO) run ./bench -only lt -json bench/results-lt.json -svg bench/results-lt.svg $(BENCH_FLAGS)

# Fault injection: soak (restarts, terminated backends, SIGKILLed consumers and
# scheduler leader, late acks), long transaction, dead group, failover, and a
# topic move between shards with the mover killed and the old shard crashed.
# Its own clusters (chaos on CHAOS_PORT, chaos-fo-p/-s on CHAOS_FAILOVER_PORT
# and +1, chaos-move-a/-b on CHAOS_MOVE_PORT and +1).
chaos: build
	$(GO) build -o bin/pgq-chaos ./cmd/pgq-chaos
	bin/pgq-chaos -port $(CHAOS_PORT) -failover-port $(CHAOS_FAILOVER_PORT) -move-port $(CHAOS_MOVE_PORT) $(CHAOS_FLAGS)

# The migrations must freeze exactly what sql/functions and sql/triggers hold.
# Then the catalog diff (scripts/pgqrelease check) on the test cluster
# (TEST_PORT) unless DATABASE_URL is set: docs/releases.md.
verify-sql: ## fail if sql/functions or sql/triggers differ from their frozen migrations; catalog diff of fresh install vs upgrades
	@set -e; \
	if [ -z "$$DATABASE_URL" ]; then DATABASE_URL=$$(scripts/devdb.sh start test $(TEST_PORT)); fi; \
	DATABASE_URL=$$DATABASE_URL scripts/verify-sql.sh

# Freeze sql/functions and sql/triggers into new numbered migrations. Once a
# release exists, its upgrade migration is generated instead (gen-upgrade).
snapshot-sql: ## freeze sql/functions and sql/triggers into new numbered migrations (before the first release)
	@! grep -qE '^[0-9]+\.[0-9]+\.[0-9]+[[:space:]]' RELEASES || { echo "snapshot-sql: a release exists: run make gen-upgrade (docs/releases.md)" >&2; exit 1; }
	$(GO) tool tern code snapshot sql/functions --migrations sql/migrations
	$(GO) tool tern code snapshot sql/triggers --migrations sql/migrations

# The upgrade test with traffic (tests/upgrade_traffic_test.go) from release
# FROM (a tag or commit; default: the newest in RELEASES, else a synthetic
# release of this tree). make test runs it too, with the default.
upgrade-test: ## upgrade with producers and consumers running: make upgrade-test FROM=vX.Y.Z
	@set -e; \
	if [ -z "$$DATABASE_URL" ]; then DATABASE_URL=$$(scripts/devdb.sh start test $(TEST_PORT)); fi; \
	DATABASE_URL=$$DATABASE_URL PGQ_UPGRADE_FROM=$(FROM) $(GO) test -count=1 -timeout 15m -run 'TestUpgradeWithTraffic$$' -v ./tests

# After a release: the one migration from the last release to this tree.
gen-upgrade: ## write the upgrade migration from the last release in RELEASES (docs/releases.md)
	@set -e; \
	if [ -z "$$DATABASE_URL" ]; then DATABASE_URL=$$(scripts/devdb.sh start test $(TEST_PORT)); fi; \
	DATABASE_URL=$$DATABASE_URL scripts/gen-upgrade.sh

db-stop: ## stop the throwaway clusters (and the test PgBouncer)
	-scripts/devdb.sh stop run
	-scripts/devdb.sh stop test
	-scripts/devdb.sh stop bench
	-scripts/devdb.sh stop benchlt
	-scripts/devdb.sh stop cron
	-scripts/devdb.sh stop restart
	-scripts/devdb.sh stop twophase
	-scripts/pgbouncer.sh stop $(PGBOUNCER_PORT)
	-scripts/devdb.sh stop chaos
	-scripts/devdb.sh stop chaos-ci
	-scripts/devdb.sh stop chaos-ci-side
	-scripts/devdb.sh stop chaos-fo-p
	-scripts/devdb.sh stop chaos-fo-s
	-scripts/devdb.sh stop chaos-move-a
	-scripts/devdb.sh stop chaos-move-b
	-scripts/devdb.sh stop fence-p
	-scripts/devdb.sh stop fence-s
	-scripts/devdb.sh stop backup
	-scripts/devdb.sh stop ha-p
	-scripts/devdb.sh stop ha-s
	-scripts/devdb.sh stop shards-a
	-scripts/devdb.sh stop shards-b
	-for c in shards-dir shards-0 shards-1 shards-2 shards-3; do scripts/devdb.sh stop $$c; done

clean: db-stop ## stop the clusters and delete their data and bin/
	rm -rf bin .pgq-dev

# pgq under Patroni (docs/ha.md): etcd + 3 Patroni nodes (synchronous_mode
# strict) on HA_BASE_PORT..+22, two sidecars, the chaos producers and
# consumers; switchover, SIGKILL of the leader, rejoin, switch back over
# HA_SECONDS (default 300), then the asynchronous variant. Installs Debian's
# patroni and etcd-server as root. HA=pgaf: pg_auto_failover instead
# (monitor + 3 nodes on HA_BASE_PORT+30..+33, no asynchronous variant).
HA_BASE_PORT ?= 36100
HA           ?= patroni
ha: build ## Patroni HA run: switchover, crash, rejoin, switch back; ends with the "ha:" line (HA_SECONDS, HA_BASE_PORT)
	HA=$(HA) HA_BASE_PORT=$(HA_BASE_PORT) deploy/ha/ha.sh

# pgq on 1, 2 and 4 shard clusters (docs/scaling-out.md): the directory on
# SHARDS_PORT, shards on SHARDS_PORT+1..+4, each capped to SHARDS_CPU cores
# per SHARDS_PERIOD (cgroup cpu.max or cpu.cfs_quota_us, as root; the quota,
# SHARDS_CPU x SHARDS_PERIOD, at least 1 ms) plus an uncapped control;
# SHARDS_SECONDS per run. Ends with the "shards:" line.
SHARDS_CPU     ?= 0.1
SHARDS_SECONDS ?= 10
SHARDS_PERIOD  ?= 10ms
shards: ## scaling over shard clusters, capped and uncapped, and the PL/Proxy path; ends with the "shards:" line
	SHARDS_CPU=$(SHARDS_CPU) SHARDS_SECONDS=$(SHARDS_SECONDS) SHARDS_PERIOD=$(SHARDS_PERIOD) scripts/shards.sh $(SHARDS_PORT)
