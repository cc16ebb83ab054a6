#!/usr/bin/env bash
# test-cleanup.sh URL — drop what the test suite creates on a server: the
# migrated template databases (pgq_tpl_*) and any per-test database
# (pgq_t_*, pgq_e2e_*, pgq_ex_*) a killed test left behind. `make test` runs it
# at the end, also after a failure, so that a shared server stays clean.
set -euo pipefail
url=${1:?usage: $0 DATABASE_URL}
q="SELECT datname FROM pg_database
   WHERE datname LIKE 'pgq\_tpl\_%' OR datname LIKE 'pgq\_t\_%'
      OR datname LIKE 'pgq\_e2e\_%' OR datname LIKE 'pgq\_ex\_%'"
n=0
for db in $(psql -qXAt "$url" -c "$q"); do
  psql -qX "$url" -c "ALTER DATABASE \"$db\" WITH IS_TEMPLATE false" >/dev/null
  psql -qX "$url" -c "DROP DATABASE IF EXISTS \"$db\" WITH (FORCE)" >/dev/null
  n=$((n + 1))
done
echo "test-cleanup: dropped $n test database(s)"
