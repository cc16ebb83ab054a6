#!/usr/bin/env bash
# verify-sql.sh — fail when sql/functions or sql/triggers differ from the newest
# snapshot tern froze of them into sql/migrations (run `make snapshot-sql`).
set -euo pipefail
cd "$(dirname "$0")/.."
status=0
for pkg in functions triggers; do
  for f in $(ls "sql/$pkg" | grep -v '^install.sql$'); do
    grep -q "template \"$f\"" "sql/$pkg/install.sql" || { echo "verify-sql: sql/$pkg/$f is not listed in sql/$pkg/install.sql (run scripts/gen-install.sh)"; status=1; }
  done
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
[ $status = 0 ] && echo "verify-sql: sql/functions and sql/triggers match their latest snapshots"
exit $status
