#!/usr/bin/env bash
# verify-sql.sh — fail when sql/functions or sql/triggers differ from the newest
# snapshot tern froze of them into sql/migrations (before the first release:
# scripts/resnapshot-dev.sh), or from the generated upgrade migration (after
# it: scripts/gen-upgrade.sh); then the catalog diff (scripts/pgqrelease
# check): a fresh install and every release in RELEASES upgraded to this tree
# must end in the same catalog, fanout.regenerate_topics() must rebuild what
# create_topic makes, fanout.version() must say what VERSION says. The
# catalog diff needs a PostgreSQL server: DATABASE_URL (make verify-sql starts
# the test cluster on TEST_PORT); VERIFY_SQL_NO_DB=1 skips it.
set -euo pipefail
cd "$(dirname "$0")/.."
status=0
released=no
grep -qE '^[0-9]+\.[0-9]+\.[0-9]+[[:space:]]+[0-9a-f]+' RELEASES 2>/dev/null && released=yes
for pkg in functions triggers; do
  for f in $(ls "sql/$pkg" | grep -v '^install.sql$'); do
    grep -q "template \"$f\"" "sql/$pkg/install.sql" || { echo "verify-sql: sql/$pkg/$f is not listed in sql/$pkg/install.sql (run scripts/gen-install.sh)"; status=1; }
  done
  [ $released = yes ] && continue  # the upgrade migration is checked by pgqrelease below
  latest=$(ls sql/migrations | grep -E "^[0-9]+_install_${pkg}\.sql$" | sort -n | tail -1 || true)
  if [ -z "$latest" ]; then
    echo "verify-sql: no migration installs sql/$pkg (run make snapshot-sql)"; status=1; continue
  fi
  num=${latest%%_*}
  grep -q "install_snapshot \"$num\"" "sql/migrations/$latest" || { echo "verify-sql: $latest does not install snapshot $num"; status=1; }
  if ! diff -r "sql/$pkg" "sql/migrations/snapshots/$num" >/tmp/verify-sql.$$ 2>&1; then
    echo "verify-sql: sql/$pkg differs from its latest snapshot sql/migrations/snapshots/$num (run make snapshot-sql):"
    cat /tmp/verify-sql.$$; status=1
  fi
  rm -f /tmp/verify-sql.$$
done
[ $status = 0 ] && [ $released = no ] && echo "verify-sql: sql/functions and sql/triggers match their latest snapshots"
want=$(tr -d '[:space:]' < VERSION)
if ! grep -q "'$want'::text" sql/functions/fanout.version.sql; then
  echo "verify-sql: sql/functions/fanout.version.sql does not return VERSION ($want)"; status=1
fi
if [ "${VERIFY_SQL_NO_DB:-}" = 1 ]; then
  echo "verify-sql: catalog diff skipped (VERIFY_SQL_NO_DB=1)"
elif [ -z "${DATABASE_URL:-}" ]; then
  echo "verify-sql: no DATABASE_URL for the catalog diff (make verify-sql starts the test cluster)"; status=1
else
  go run ./scripts/pgqrelease check || status=1
fi
exit $status
