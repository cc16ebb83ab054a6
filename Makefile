# pgq — consumer-group fan-out for PostgreSQL.
#   make run      throwaway local PostgreSQL + migrations + pgq-scheduler run
#   make test     the whole suite against a throwaway PostgreSQL (or $DATABASE_URL)
#   make bench    benchmarks as ratios to baselines measured in the same run
#   make chaos    fault-injection soak on its own throwaway clusters (CHAOS_SECONDS=N to lengthen)
SHELL := /bin/bash
GO    ?= go
BIN   := bin/pgq-scheduler
TEST_PORT  ?= 55433
RUN_PORT   ?= 55432
BENCH_PORT ?= 55434
RESTART_PORT ?= 55441
CHAOS_PORT ?= 55435
CHAOS_FAILOVER_PORT ?= 55436
CHAOS_CI_PORT ?= 55442
LISTEN     ?= 127.0.0.1:9187

.PHONY: all build run test test-go test-e2e bench bench-quick chaos verify-sql snapshot-sql db-stop clean

all: build

build:
	$(GO) build -o $(BIN) ./cmd/pgq-scheduler

# With DATABASE_URL set, run against it; otherwise start the embedded default.
run: build
	@set -e; \
	if [ -z "$$DATABASE_URL" ]; then \
	  DATABASE_URL=$$(scripts/devdb.sh start run $(RUN_PORT)); \
	  echo "pgq: throwaway PostgreSQL at $$DATABASE_URL (stop it with: make db-stop)"; \
	fi; \
	export DATABASE_URL; \
	$(BIN) migrate; \
	echo "pgq: psql \"$$DATABASE_URL\""; \
	echo "pgq: console: http://$(LISTEN)/  (read-only unless PGQ_CONSOLE_ADMIN=true PGQ_CONSOLE_TOKEN=...)"; \
	echo "pgq: metrics and health: http://$(LISTEN)/metrics  http://$(LISTEN)/healthz"; \
	echo "pgq: status: DATABASE_URL=\"$$DATABASE_URL\" $(BIN) status"; \
	exec $(BIN) run --listen $(LISTEN)

test: build
	@set -e; \
	if [ -z "$$DATABASE_URL" ]; then DATABASE_URL=$$(scripts/devdb.sh start test $(TEST_PORT)); fi; \
	export DATABASE_URL PGQ_TEST_RESTART_PORT=$(RESTART_PORT) PGQ_TEST_CONSOLE_LISTEN=$(LISTEN) PGQ_TEST_CHAOS_PORT=$(CHAOS_CI_PORT); \
	$(GO) vet ./...; \
	$(GO) test -count=1 -timeout 20m ./... ; \
	tests/e2e_psql.sh

bench: build
	@set -e; \
	if [ -z "$$DATABASE_URL" ]; then DATABASE_URL=$$(scripts/devdb.sh start bench $(BENCH_PORT)); fi; \
	export DATABASE_URL; \
	$(GO) run ./bench $(BENCH_FLAGS)

bench-quick:
	$(MAKE) bench BENCH_FLAGS=-quick

# Fault injection: soak (restarts, terminated backends, SIGKILLed consumers and
# scheduler leader, late acks), long transaction, dead group, failover. Its own
# clusters (chaos on CHAOS_PORT, chaos-fo-p/-s on CHAOS_FAILOVER_PORT and +1).
chaos: build
	$(GO) build -o bin/pgq-chaos ./cmd/pgq-chaos
	bin/pgq-chaos -port $(CHAOS_PORT) -failover-port $(CHAOS_FAILOVER_PORT) $(CHAOS_FLAGS)

# The migrations must freeze exactly what sql/functions and sql/triggers hold.
verify-sql:
	scripts/verify-sql.sh

# Freeze sql/functions and sql/triggers into new numbered migrations.
snapshot-sql:
	$(GO) tool tern code snapshot sql/functions --migrations sql/migrations
	$(GO) tool tern code snapshot sql/triggers --migrations sql/migrations

db-stop:
	-scripts/devdb.sh stop run
	-scripts/devdb.sh stop test
	-scripts/devdb.sh stop bench
	-scripts/devdb.sh stop chaos
	-scripts/devdb.sh stop chaos-ci
	-scripts/devdb.sh stop chaos-ci-side
	-scripts/devdb.sh stop chaos-fo-p
	-scripts/devdb.sh stop chaos-fo-s

clean: db-stop
	rm -rf bin .pgq-dev
