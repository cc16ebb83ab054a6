#!/usr/bin/env bash
# gen-upgrade.sh — after a release: (re)write the ONE migration that brings a
# database from the last release in RELEASES to this tree (docs/releases.md):
# sql/upgrade/before.sql (hand-written schema changes), DROP FUNCTION/VIEW of
# every signature in the release's sql/signatures.txt that is gone or changed,
# the files of sql/functions and sql/triggers that are new or changed since
# the release (grants and catalog triggers always), sql/upgrade/after.sql
# (hand-written backfills), then fanout.regenerate_topics(). Also rewrites
# sql/signatures.txt. Needs a PostgreSQL server for temporary databases:
# DATABASE_URL, else the throwaway test cluster on TEST_PORT (default 25433).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/gen-install.sh
if [ -z "${DATABASE_URL:-}" ]; then
  DATABASE_URL=$(scripts/devdb.sh start test "${TEST_PORT:-25433}")
fi
DATABASE_URL=$DATABASE_URL go run ./scripts/pgqrelease gen-upgrade
