#!/usr/bin/env bash
# ha.sh — make ha: pgq under Patroni (docs/ha.md).
#
#   deploy/ha/ha.sh [pgq-ha flags]     HA_SECONDS, HA_BASE_PORT, HA (patroni | pgaf)
#
# Installs what the run needs the way scripts/deps.sh installs make test's
# components (as root with apt-get: Debian's patroni and etcd-server, or
# for HA=pgaf postgresql-<major>-auto-failover; else
# it says what to install), builds bin/pgq-scheduler and bin/pgq-ha and
# runs the scripted run. Its last line is pgq-ha's verdict.
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
cd "$here"
log() { echo "ha: $*" >&2; }

pg_major() {
  local d
  d=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
  "$d/postgres" --version 2>/dev/null | sed -E 's/.* ([0-9]+)(\.[0-9]+)?.*/\1/'
}
case "${HA:-patroni}" in
  patroni) pkgs="patroni etcd-server"
    present() { command -v patroni >/dev/null 2>&1 && command -v etcd >/dev/null 2>&1; } ;;
  pgaf) pkgs="postgresql-$(pg_major)-auto-failover"
    present() { command -v pg_autoctl >/dev/null 2>&1; } ;;
  *) echo "ha: HA=${HA} unknown (patroni or pgaf)" >&2; exit 2 ;;
esac
if ! present; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    log "apt-get update"
    DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=120 update -qq >&2 || true
    log "apt-get install -y $pkgs"
    # shellcheck disable=SC2086
    DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=120 install -y -qq $pkgs >&2 || true
  fi
  if ! present; then
    cat >&2 <<MSG

################################################################################
ha: $pkgs missing and could not be installed here$([ "$(id -u)" = 0 ] || echo " (not root)").
    sudo apt-get install -y $pkgs
################################################################################
MSG
    exit 1
  fi
fi
# Debian starts an etcd service on install where it can; the run uses its
# own etcd on its own ports, so a running service does not matter.
make --no-print-directory build >&2
go build -o bin/pgq-ha ./cmd/pgq-ha
exec bin/pgq-ha -manager "${HA:-patroni}" -base-port "${HA_BASE_PORT:-36100}" "$@"
