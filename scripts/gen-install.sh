#!/usr/bin/env bash
# regenerate sql/<pkg>/install.sql listing every file (grants last)
set -e
cd "$(dirname "$0")/../sql"
for pkg in functions triggers; do
  {
    echo "-- install.sql — the $pkg code package: every file of sql/$pkg, in order."
    echo "-- Frozen into sql/migrations by \`make snapshot-sql\` (tern code snapshot)."
    for f in $(ls $pkg | grep -v "^install.sql$" | grep -v "^_grants.sql$" | LC_ALL=C sort); do
      echo "{{ template \"$f\" . }}"
    done
    if [ -f $pkg/_grants.sql ]; then echo '{{ template "_grants.sql" . }}'; fi
  } > $pkg/install.sql
done
