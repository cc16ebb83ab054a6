#!/usr/bin/env bash
# resnapshot-dev.sh — while a release is unpublished, re-freeze its code
# packages in place: drops the snapshots after the last released migration
# (RELEASED, default 1) and snapshots sql/functions and sql/triggers anew.
# Once RELEASES lists a release, it runs scripts/gen-upgrade.sh instead: the
# released migrations stay frozen and one upgrade migration holds what changed.
set -euo pipefail
cd "$(dirname "$0")/.."
if grep -qE '^[0-9]+\.[0-9]+\.[0-9]+[[:space:]]+[0-9a-f]+' RELEASES 2>/dev/null; then
  exec scripts/gen-upgrade.sh
fi
released=${RELEASED:-1}
scripts/gen-install.sh
for f in sql/migrations/[0-9]*_install_*.sql; do
  [ -e "$f" ] || continue
  n=$((10#$(basename "$f" | cut -d_ -f1)))
  if [ "$n" -gt "$released" ]; then
    rm -rf "sql/migrations/snapshots/$(basename "$f" | cut -d_ -f1)" "$f"
  fi
done
go tool tern code snapshot sql/functions --migrations sql/migrations
go tool tern code snapshot sql/triggers --migrations sql/migrations
