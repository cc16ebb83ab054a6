#!/usr/bin/env bash
# ha.sh — make ha: pgq under Patroni (docs/ha.md).
#
#   deploy/ha/ha.sh [pgq-ha flags]     HA_SECONDS, HA_BASE_PORT, HA (patroni)
#
# Installs what the run needs the way scripts/deps.sh installs make test's
# components (as root with apt-get: Debian's patroni and etcd-server; else
# it says what to install), builds bin/pgq-scheduler and bin/pgq-ha and
# runs the scripted run. Its last line is pgq-ha's verdict.
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
cd "$here"
log() { echo "ha: $*" >&2; }

case "${HA:-patroni}" in
  patroni) ;;
  pgaf)
    echo "ha: HA=pgaf (pg_auto_failover) is not implemented yet: docs/ha.md, \"pg_auto_failover\"" >&2
    exit 2 ;;
  *) echo "ha: HA=${HA} unknown (patroni)" >&2; exit 2 ;;
esac

present() { command -v patroni >/dev/null 2>&1 && command -v etcd >/dev/null 2>&1; }
if ! present; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    log "apt-get update"
    DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=120 update -qq >&2 || true
    log "apt-get install -y patroni etcd-server"
    DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=120 install -y -qq patroni etcd-server >&2 || true
  fi
  if ! present; then
    cat >&2 <<MSG

################################################################################
ha: Patroni and etcd are missing and could not be installed here$([ "$(id -u)" = 0 ] || echo " (not root)").
    sudo apt-get install -y patroni etcd-server
################################################################################
MSG
    exit 1
  fi
fi
# Debian starts an etcd service on install where it can; the run uses its
# own etcd on its own ports, so a running service does not matter.
make --no-print-directory build >&2
go build -o bin/pgq-ha ./cmd/pgq-ha
exec bin/pgq-ha -base-port "${HA_BASE_PORT:-36100}" "$@"
