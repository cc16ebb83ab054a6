#!/usr/bin/env bash
# groups-view-timing.sh — how long the fanout.groups view takes with many
# topics (docs/architecture.md, "The groups view"). Reproducible: creates a
# database pgq_viewtiming on the server of DATABASE_URL (dropped first, and
# at the end unless KEEP=1), migrates it (bin/pgq-scheduler; make build),
# creates TOPICS queue topics (default 1000), publishes 10 messages to each
# and reads and acks 5 of them (each topic's group then has 5 unread), then
# times `SELECT count(*) FROM fanout.groups` three times, each in a new
# session (cold: the session has not opened the topics' tables yet), with
# the CPU time of its backend, then twice in one session (warm), checks
# that every group shows a lag of 5 and prints the locks the view's
# transaction held.
# KEEP=1 keeps the database; MEASURE_ONLY=1 measures a kept one again (say
# after replacing the view's definition in it, for a before/after pair on
# the same data).
#   DATABASE_URL=postgres://... scripts/groups-view-timing.sh [TOPICS]
set -euo pipefail
cd "$(dirname "$0")/.."
: "${DATABASE_URL:?set DATABASE_URL to a server (any database on it)}"
topics=${1:-1000}
db=pgq_viewtiming
base=${DATABASE_URL%%\?*}
url="${base%/*}/$db"
psql() { command psql -X -v ON_ERROR_STOP=1 -q "$@"; }
if [ "${MEASURE_ONLY:-0}" != 1 ]; then
psql "$DATABASE_URL" -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" -c "CREATE DATABASE $db"
[ "${KEEP:-0}" = 1 ] || [ "${MEASURE_ONLY:-0}" = 1 ] || trap 'psql "$DATABASE_URL" -c "DROP DATABASE IF EXISTS $db WITH (FORCE)"' EXIT
DATABASE_URL=$url bin/pgq-scheduler migrate >/dev/null
start=$(date +%s.%N)
# One topic per transaction: a topic's tables take locks of their own.
psql "$url" -c "SELECT format('SELECT fanout.create_topic(%L);', 'vt' || i) FROM generate_series(1, $topics) i" -t -A \
  | psql "$url" >/dev/null
psql "$url" -t -A -c "SELECT format('SELECT count(fanout.publish(%L, jsonb_build_object(''n'', j))) FROM generate_series(1, 10) j;', 'vt' || i) FROM generate_series(1, $topics) i" \
  | psql "$url" >/dev/null
psql "$url" -t -A -c "SELECT format('SELECT fanout.ack(max(lease_id)) FROM fanout.read(%L, max_messages => 5);', 'vt' || i) FROM generate_series(1, $topics) i" \
  | psql "$url" >/dev/null
echo "groups-view-timing: $topics queue topics set up in $(printf '%.1f' "$(echo "$(date +%s.%N) - $start" | bc)") s"
fi
# Each run in a new session: the view's wall time and the CPU time its
# backend spent (from /proc: the server must run on this machine; on a
# loaded machine the CPU time is the figure to compare).

for run in 1 2 3; do
  out=$(psql "$url" -t -A -F ' ' <<'SQL'
SELECT pg_backend_pid() AS pid \gset
\setenv PGQ_BACKEND :pid
\! awk '{print "cpu0", ($14 + $15) / 100}' /proc/$PGQ_BACKEND/stat
\timing on
SELECT count(*) AS groups, count(*) FILTER (WHERE lag_messages = 5) AS lag_5 FROM fanout.groups;
\timing off
\! awk '{print "cpu1", ($14 + $15) / 100}' /proc/$PGQ_BACKEND/stat
SELECT count(*) FROM pg_locks WHERE pid = pg_backend_pid();
SQL
)
  c0=$(echo "$out" | awk '$1 == "cpu0" {print $2}'); c1=$(echo "$out" | awk '$1 == "cpu1" {print $2}')
  echo "run $run (new session): groups, of them with lag 5: $(echo "$out" | sed -n 1p)," \
    "$(echo "$out" | grep -o 'Time: [0-9.]* ms'), backend CPU $(echo "$c1 - $c0" | bc) s"
done
psql "$url" -t -A -F ' ' <<'SQL' | sed 's/^/same session, again: /'
\timing on
SELECT count(*) FROM fanout.groups;
BEGIN;
SELECT count(*) FROM fanout.groups;
SELECT 'locks held by the view''s transaction:', count(*) FROM pg_locks WHERE pid = pg_backend_pid();
COMMIT;
SQL
