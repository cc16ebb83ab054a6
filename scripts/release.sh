#!/usr/bin/env bash
# release.sh VERSION — cut release VERSION (major.minor.patch) of this checkout
# (docs/releases.md):
#   1. refuses unless the tree is clean, VERSION is new and above the last
#      release, and make verify-sql passes as the tree is;
#   2. writes VERSION, the version fanout.version() returns, and the CHANGELOG
#      heading ("## [Unreleased]" becomes "## [VERSION] - date", a new empty
#      "Unreleased" above it);
#   3. freezes the SQL: the first release re-freezes migrations 002/003 in
#      place (scripts/resnapshot-dev.sh) and records sql/signatures.txt; a
#      later one writes its upgrade migration (scripts/gen-upgrade.sh);
#   4. runs verify-sql again, commits "release VERSION" and tags it vVERSION;
#   5. records "VERSION <commit>" in RELEASES and empties sql/upgrade/*.sql
#      (their changes are in the release's migration now) in a second commit.
# Nothing is pushed: push the branch and the tag yourself (git push --follow-tags).
# Needs a PostgreSQL server: DATABASE_URL, else the throwaway test cluster on
# TEST_PORT (default 25433). RELEASE_DATE overrides the date (YYYY-MM-DD).
set -euo pipefail
cd "$(dirname "$0")/.."
die() { echo "release: $*" >&2; exit 1; }
v=${1:-}
[[ $v =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || die "usage: scripts/release.sh MAJOR.MINOR.PATCH (got '${v}')"
[ -z "$(git status --porcelain)" ] || die "the working tree is not clean: commit or stash first"
git rev-parse -q --verify "refs/tags/v$v" >/dev/null && die "tag v$v exists already"
last=$(grep -E '^[0-9]+\.[0-9]+\.[0-9]+[[:space:]]' RELEASES | tail -1 | awk '{print $1}' || true)
if [ -n "$last" ]; then
  [ "$(printf '%s\n%s\n' "$last" "$v" | sort -V | tail -1)" = "$v" ] && [ "$last" != "$v" ] \
    || die "$v is not above the last release $last"
fi
if [ -z "${DATABASE_URL:-}" ]; then
  DATABASE_URL=$(scripts/devdb.sh start test "${TEST_PORT:-25433}")
fi
export DATABASE_URL
echo "release: verify-sql of the tree as it is"
scripts/verify-sql.sh || die "verify-sql fails before the release: fix the tree first"

echo "release: stamping $v"
printf '%s\n' "$v" > VERSION
sed -i -E "s/^SELECT '[^']*'::text$/SELECT '$v'::text/" sql/functions/fanout.version.sql
grep -q "^SELECT '$v'::text$" sql/functions/fanout.version.sql || die "could not stamp sql/functions/fanout.version.sql"
date=${RELEASE_DATE:-$(date -u +%F)}
grep -q '^## \[Unreleased\]' CHANGELOG.md || die "CHANGELOG.md has no '## [Unreleased]' section"
sed -i "0,/^## \[Unreleased\]/s//## [Unreleased]\n\n## [$v] - $date/" CHANGELOG.md

echo "release: freezing the SQL"
if [ -z "$last" ]; then
  scripts/resnapshot-dev.sh >/dev/null
  go run ./scripts/pgqrelease signatures
else
  scripts/gen-upgrade.sh
fi
scripts/verify-sql.sh || die "verify-sql fails after freezing: nothing committed (git checkout . to undo)"
git add -A
git commit -q -m "release $v"
git tag -a "v$v" -m "pgq $v"
commit=$(git rev-parse HEAD)

sed -i '/^# No release yet/d' RELEASES
printf '%s %s\n' "$v" "$commit" >> RELEASES
for f in sql/upgrade/before.sql sql/upgrade/after.sql; do
  [ -e "$f" ] || continue
  awk '/^--/ { print; next } { exit }' "$f" > "$f.tmp" && mv "$f.tmp" "$f"  # its header comment only
done
git add -A
git commit -q -m "RELEASES: record $v ($commit); sql/upgrade emptied for the next release"
echo "release: v$v is $commit (tag v$v). Push: git push --follow-tags"
