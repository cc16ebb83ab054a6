#!/usr/bin/env bash
# gen-install.sh — regenerate sql/<pkg>/install.sql for each code package:
# every definition file in byte order, then the files starting with "_"
# (grants, trigger attachments) which must run after the definitions.
set -euo pipefail
cd "$(dirname "$0")/../sql"
for pkg in functions triggers; do
  {
    echo "-- install.sql — the $pkg code package: every file of sql/$pkg, in order."
    echo "-- Frozen into sql/migrations by \`make snapshot-sql\` (tern code snapshot)."
    for f in $(ls "$pkg" | grep -v '^install.sql$' | grep -v '^_' | LC_ALL=C sort) \
             $(ls "$pkg" | grep '^_' | LC_ALL=C sort); do
      echo "{{ template \"$f\" . }}"
    done
  } > "$pkg/install.sql"
done
