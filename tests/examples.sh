#!/usr/bin/env bash
# examples.sh — run the Python (psycopg 3) and Node (pg) examples against a
# fresh database migrated by the pgq-scheduler binary, and check that every
# message each one published arrived (the examples exit 0 only then).
# Their dependencies come from scripts/deps.sh (make test ensures them first;
# a missing one fails here loudly, never a silent pass).
set -euo pipefail
cd "$(dirname "$0")/.."
: "${DATABASE_URL:?DATABASE_URL must point at a PostgreSQL server (make test sets it)}"
scripts/deps.sh ensure psycopg node
db="pgq_ex_$$"
base=${DATABASE_URL%%\?*}
base=${base%/*}
query=""
case "$DATABASE_URL" in *\?*) query="?${DATABASE_URL#*\?}" ;; esac
url="$base/$db$query"

psql -qX "$DATABASE_URL" -c "CREATE DATABASE $db" >/dev/null
trap 'psql -qX "$DATABASE_URL" -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null' EXIT
bin/pgq-scheduler migrate --database-url "$url" >/dev/null

fail=0
# Debian's python3-psycopg is installed for the system interpreter.
if /usr/bin/python3 examples/python/pgq_example.py --url "$url" --count 50; then
  echo "ok   python example"
else
  echo "FAIL python example"; fail=1
fi
if node examples/node/example.js --url "$url" --count 50; then
  echo "ok   node example"
else
  echo "FAIL node example"; fail=1
fi
exit $fail
