#!/usr/bin/env bash
# examples.sh — the Python (psycopg 3) and Node (pg) examples exactly as
# examples/README.md tells a reader to run them: against `make run`, with the
# command lines of its second ```sh block. `make run` runs here on a fresh
# database of its own (DATABASE_URL set, LISTEN 127.0.0.1:0: no cluster or
# port of a `make run` of yours is touched), so its migrations are what the
# examples use; each line runs with that database's URL in place of the
# README's, which must be the URL `make run` uses by default. The examples
# exit 0 only if every message they published arrived exactly once.
# Their dependencies come from scripts/deps.sh (make test ensures them first;
# a missing one fails here loudly, never a silent pass).
set -euo pipefail
cd "$(dirname "$0")/.."
: "${DATABASE_URL:?DATABASE_URL must point at a PostgreSQL server (make test sets it)}"
scripts/deps.sh ensure psycopg node
fail=0

# The README's URL is the one `make run` uses by default.
readme=examples/README.md
readme_url=$(grep -o -m1 'postgres://[^"]*' "$readme")
run_port=$(make -s -n run | sed -n 's/.*devdb.sh start run \([0-9]*\).*/\1/p' | head -1)
run_url=$(scripts/devdb.sh url run "$run_port")
if [ "$readme_url" = "$run_url" ]; then
  echo "ok   $readme uses make run's URL ($run_url)"
else
  echo "FAIL $readme uses $readme_url, make run's database is $run_url"; fail=1
fi
mapfile -t lines < <(awk '/^```sh/ {n++; f = (n == 2); next} /^```/ {f = 0} f' "$readme" \
  | grep -E '^(python3|node|\(cd examples/node) ')
if [ "${#lines[@]}" -ne 3 ]; then
  echo "FAIL $readme: want its python3, npm ci and node lines in its second sh block, found ${#lines[@]}"; exit 1
fi

# The interpreter that has psycopg: python3 on PATH, or else the system's
# (Debian's python3-psycopg is for /usr/bin/python3), as the README says.
py=""
for c in python3 /usr/bin/python3; do
  if command -v "$c" >/dev/null 2>&1 && "$c" -c 'import psycopg' >/dev/null 2>&1; then py=$c; break; fi
done
if [ -z "$py" ]; then
  echo "FAIL no python3 with psycopg (python3 on PATH: $(command -v python3 || echo none)); sudo make deps"; exit 1
fi
[ "$py" = python3 ] || echo "note: python3 on PATH ($(command -v python3)) has no psycopg; the README's python3 line runs with $py"

db="pgq_ex_$$"
base=${DATABASE_URL%%\?*}
base=${base%/*}
query=""
case "$DATABASE_URL" in *\?*) query="?${DATABASE_URL#*\?}" ;; esac
url="$base/$db$query"
psql -qX "$DATABASE_URL" -c "CREATE DATABASE $db" >/dev/null

# make run on it (migrations, then the sidecar), in a process group of its own.
mkdir -p .pgq-dev
log=.pgq-dev/examples-make-run.log
DATABASE_URL="$url" setsid make --no-print-directory run LISTEN=127.0.0.1:0 >"$log" 2>&1 &
runpid=$!
cleanup() {
  kill -TERM -- "-$runpid" 2>/dev/null || true
  wait "$runpid" 2>/dev/null || true
  psql -qX "$DATABASE_URL" -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null
}
trap cleanup EXIT
for _ in $(seq 1 600); do # until the sidecar runs (at most 2 minutes)
  grep -q '"msg":"serving /metrics and /healthz"' "$log" && break
  kill -0 "$runpid" 2>/dev/null || break
  sleep 0.2
done
if grep -q '"msg":"serving /metrics and /healthz"' "$log"; then
  echo "ok   make run migrated $db and runs pgq-scheduler on it"
else
  echo "FAIL make run did not come up:"; cat "$log"; exit 1
fi

for line in "${lines[@]}"; do
  cmd=${line//"$readme_url"/"$url"}
  case "$cmd" in python3\ *) cmd="$py ${cmd#python3 }" ;; esac
  cmd=${cmd%%#*} # the line's comment
  echo "run  $line"
  if eval "$cmd"; then
    echo "ok   $line"
  else
    echo "FAIL $line"; fail=1
  fi
done
exit $fail
