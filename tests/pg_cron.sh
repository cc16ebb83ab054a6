#!/usr/bin/env bash
# pg_cron.sh [PORT] — pgq maintenance from pg_cron, as docs/operations.md documents it.
#
# Starts its own throwaway cluster `cron` (fresh every time) with
# shared_preload_libraries = 'pg_cron' and cron.database_name = 'app',
# migrates pgq into `app`, runs the pg_cron block of
# docs/operations.md verbatim (taken from the page, so the two cannot drift), and waits for pg_cron's
# runs to (1) mark a silent group dead and (2) rotate a partition: the next
# partition created, the old one closed. pg_cron 1.4 fires once a minute, so
# this takes two to three minutes; `make test` runs it beside the Go tests.
set -euo pipefail
cd "$(dirname "$0")/.."
port=${1:-25442}
scripts/deps.sh ensure pg_cron

scripts/devdb.sh reset cron
trap 'scripts/devdb.sh stop cron' EXIT
admin=$(DEVDB_OPTS="-c shared_preload_libraries=pg_cron -c cron.database_name=app" scripts/devdb.sh start cron "$port")
url="postgres://postgres@127.0.0.1:$port/app?sslmode=disable"
psql -qX "$admin" -c "CREATE DATABASE app" >/dev/null
bin/pgq-scheduler migrate --database-url "$url" >/dev/null

q() { PGOPTIONS="-c client_min_messages=warning" psql -qXAt -v ON_ERROR_STOP=1 "$url" -c "$1"; }

# The page's block (the one marked "<!-- e2e: run by tests/pg_cron.sh -->",
# which tests/e2e_psql.sh leaves to this script), run verbatim.
block=$(awk '/<!-- e2e: run by tests\/pg_cron.sh -->/ {m=1; next} m && /^```sql/ {f=1; next} f && /^```/ {exit} f' docs/operations.md)
case "$block" in *"SELECT cron.schedule('pgq-maintenance'"*) ;;
  *) echo "FAIL pg_cron: docs/operations.md has no block marked for tests/pg_cron.sh with cron.schedule('pgq-maintenance', ...)"; exit 1 ;;
esac
PGOPTIONS="-c client_min_messages=warning" psql -qX -v ON_ERROR_STOP=1 "$url" <<<"$block" >/dev/null
echo "pg_cron $(q "SELECT extversion FROM pg_extension WHERE extname = 'pg_cron'"): docs/operations.md's block, verbatim:"
echo "$block" | sed 's/^/  /'

# A group that never comes back (dead after one missed 1 s heartbeat), and a
# topic with one-minute partitions holding a message.
q "SELECT fanout.create_topic('cron.events', semantics => 'pubsub', partition_interval => '1 minute')" >/dev/null
q "SELECT fanout.subscribe('cron.events', 'gone', heartbeat_timeout => '1 second', dead_after_misses => 1)" >/dev/null
q "SELECT fanout.publish('cron.events', '{\"n\": 1}')" >/dev/null

dead=f rotated=f
for _ in $(seq 1 48); do # at most 4 minutes
  sleep 5
  dead=$(q "SELECT coalesce(bool_or(status = 'dead'), false) FROM fanout.groups WHERE group_name = 'gone'")
  rotated=$(q "SELECT count(*) >= 2 AND count(*) FILTER (WHERE p.closed_at IS NOT NULL) >= 1
               FROM fanout.partition p JOIN fanout.topic t USING (topic_id) WHERE t.topic = 'cron.events'")
  [ "$dead" = t ] && [ "$rotated" = t ] && break
done
runs=$(q "SELECT count(*) FILTER (WHERE status = 'succeeded') || ' succeeded, ' ||
                 count(*) FILTER (WHERE status = 'failed') || ' failed'
          FROM cron.job_run_details d JOIN cron.job j USING (jobid) WHERE j.jobname = 'pgq-maintenance'")
failed=$(q "SELECT coalesce(string_agg(return_message, '; '), '') FROM cron.job_run_details WHERE status = 'failed'")
echo "pg_cron runs of pgq-maintenance: $runs"
fail=0
if [ "$dead" = t ]; then echo "ok   pg_cron: the silent group was marked dead"; else echo "FAIL pg_cron: the silent group is not dead"; fail=1; fi
if [ "$rotated" = t ]; then echo "ok   pg_cron: a partition rotated (next created, old closed)"; else echo "FAIL pg_cron: no partition rotated"; fail=1; fi
if [ -n "$failed" ]; then echo "FAIL pg_cron: failed runs: $failed"; fail=1; fi
exit $fail
