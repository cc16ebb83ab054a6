#!/usr/bin/env bash
# deps.sh — the components `make test` exercises beyond Go and PostgreSQL.
#
#   scripts/deps.sh check NAME...    exit 0 if all are present
#   scripts/deps.sh ensure NAME...   install what is missing (as root, with
#                                    apt-get / npm), else explain and exit 1
#
# NAME is one of:
#   pg_cron    Debian postgresql-<major>-cron for the server in devdb.sh
#   pgbouncer  Debian pgbouncer
#   psycopg    Debian python3-psycopg (psycopg 3) for /usr/bin/python3
#   node       Node.js + npm, and examples/node/node_modules from the lockfile
#   pgq3       Debian postgresql-<major>-pgq3 (Skytools PgQ, make bench's baseline)
#   nats       Debian nats-server (the relay's test broker, JetStream on)
#   plproxy    Debian postgresql-<major>-plproxy (PL/Proxy: schema fanout_proxy,
#              the shards test and make shards)
#   promtool   promtool from Debian's prometheus package: on PATH, or else
#              extracted from the package (apt-get download, no install: the
#              package's Prometheus server is neither installed nor started)
#              into .pgq-dev/tools/usr/bin/promtool
#
#   scripts/deps.sh path promtool    print the promtool to run
#
# Nothing is skipped quietly: a component that cannot be installed makes the
# calling test fail with a message that says what to run.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cmd=${1:-}; shift || true

log() { echo "deps: $*" >&2; }

pg_major() {
  local d
  d=$(pg_config --bindir 2>/dev/null || ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
  "$d/postgres" --version 2>/dev/null | sed -E 's/.* ([0-9]+)(\.[0-9]+)?.*/\1/'
}

pkg_of() {
  case "$1" in
    pg_cron) echo "postgresql-$(pg_major)-cron" ;;
    pgbouncer) echo pgbouncer ;;
    psycopg) echo python3-psycopg ;;
    node) echo "nodejs npm" ;;
    pgq3) echo "postgresql-$(pg_major)-pgq3" ;;
    promtool) echo prometheus ;;
    nats) echo nats-server ;;
    plproxy) echo "postgresql-$(pg_major)-plproxy" ;;
  esac
}

tools="$here/.pgq-dev/tools"
promtool_path() {
  if command -v promtool >/dev/null 2>&1; then command -v promtool
  elif [ -x "$tools/usr/bin/promtool" ]; then echo "$tools/usr/bin/promtool"
  else return 1
  fi
}

# promtool_fetch extracts promtool from Debian's prometheus package.
promtool_fetch() {
  local tmp
  tmp=$(mktemp -d)
  log "apt-get download prometheus (promtool only, extracted into $tools)"
  if ! (cd "$tmp" && apt-get download prometheus >&2 2>/dev/null); then
    if [ "$(id -u)" = 0 ] && [ -z "$apt_updated" ]; then
      log "apt-get update"
      DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=120 update -qq >&2 || true
      apt_updated=1
    fi
    (cd "$tmp" && apt-get download prometheus >&2 2>/dev/null) || { rm -rf "$tmp"; return 1; }
  fi
  mkdir -p "$tmp/x" "$tools/usr/bin"
  dpkg-deb -x "$tmp"/prometheus_*.deb "$tmp/x" && cp "$tmp/x/usr/bin/promtool" "$tools/usr/bin/promtool"
  rm -rf "$tmp"
}

present() {
  case "$1" in
    pg_cron) [ -f "/usr/lib/postgresql/$(pg_major)/lib/pg_cron.so" ] ;;
    pgbouncer) command -v pgbouncer >/dev/null 2>&1 || [ -x /usr/sbin/pgbouncer ] ;;
    psycopg) /usr/bin/python3 -c 'import psycopg' >/dev/null 2>&1 ;;
    node) command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 \
            && [ -d "$here/examples/node/node_modules/pg" ] ;;
    pgq3) [ -f "/usr/share/postgresql/$(pg_major)/extension/pgq.control" ] ;;
    promtool) promtool_path >/dev/null ;;
    nats) command -v nats-server >/dev/null 2>&1 || [ -x /usr/bin/nats-server ] || [ -x /usr/sbin/nats-server ] ;;
    plproxy) [ -f "/usr/share/postgresql/$(pg_major)/extension/plproxy.control" ] ;;
    *) log "unknown component $1"; return 2 ;;
  esac
}

apt_updated=""
apt_install() {
  if [ -z "$apt_updated" ]; then
    log "apt-get update"
    DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=120 update -qq >&2 || return 1
    apt_updated=1
  fi
  log "apt-get install -y $*"
  DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=120 install -y -qq "$@" >&2
}

explain() {
  cat >&2 <<MSG

################################################################################
deps: $1 is missing and could not be installed here$([ "$(id -u)" = 0 ] || echo " (not root)").
  Install it, then run make $([ "$1" = pgq3 ] && echo bench || echo test) again:
$([ "$1" = pgq3 ] || echo "    sudo make deps                       # everything make test needs (Debian/Ubuntu)")
    sudo apt-get install -y $(pkg_of "$1")
MSG
  [ "$1" = node ] && echo "    cd examples/node && npm ci           # the pg package, from the lockfile" >&2
  echo "################################################################################" >&2
}

ensure() {
  local c=$1
  present "$c" && return 0
  if [ "$c" = promtool ] && command -v apt-get >/dev/null 2>&1 && command -v dpkg-deb >/dev/null 2>&1; then
    promtool_fetch || true
    present "$c" && return 0
    explain "$c"
    return 1
  fi
  if [ "$c" = node ] && command -v npm >/dev/null 2>&1; then
    log "npm ci in examples/node (the lockfile pins pg)"
    (cd "$here/examples/node" && npm ci --no-audit --no-fund --loglevel=error >&2) || true
    present "$c" && return 0
  fi
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    # shellcheck disable=SC2046
    apt_install $(pkg_of "$c") || true
    if [ "$c" = node ] && command -v npm >/dev/null 2>&1; then
      (cd "$here/examples/node" && npm ci --no-audit --no-fund --loglevel=error >&2) || true
    fi
    present "$c" && return 0
  fi
  explain "$c"
  return 1
}

case "$cmd" in
  check) for c in "$@"; do present "$c" || exit 1; done ;;
  path)
    case "${1:-}" in
      promtool) ensure promtool >/dev/null && promtool_path ;;
      *) echo "usage: $0 path promtool" >&2; exit 2 ;;
    esac ;;
  ensure)
    rc=0
    for c in "$@"; do ensure "$c" || rc=1; done
    exit $rc ;;
  *) echo "usage: $0 check|ensure pg_cron|pgbouncer|psycopg|node|pgq3|promtool|nats|plproxy..." >&2; exit 2 ;;
esac
