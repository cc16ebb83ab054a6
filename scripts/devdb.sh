#!/usr/bin/env bash
# devdb.sh — a throwaway local PostgreSQL for `make run`, `make test` and `make bench`.
#
#   scripts/devdb.sh start NAME PORT   start (or reuse) cluster NAME on 127.0.0.1:PORT; prints its URL
#   scripts/devdb.sh stop NAME         stop cluster NAME (data is kept until `make clean`)
#   scripts/devdb.sh url NAME PORT     print the URL without starting anything
#   scripts/devdb.sh crash NAME        stop cluster NAME with `pg_ctl stop -m immediate` (a crash; make chaos)
#   scripts/devdb.sh standby NAME PORT PRIMARY_PORT
#                                      pg_basebackup -R of the cluster on PRIMARY_PORT into NAME, then start
#                                      NAME as its streaming standby on PORT; prints its URL (make chaos)
#   scripts/devdb.sh promote NAME      promote the standby NAME (pg_ctl promote)
#   scripts/devdb.sh destroy NAME      stop cluster NAME at once and delete its data
#   scripts/devdb.sh reset NAME        stop cluster NAME and delete its data
#
# DEVDB_OPTS adds server options when a cluster starts (e.g.
# "-c shared_preload_libraries=pg_cron"). Cluster `test` runs with fsync off
# (throwaway data); every other cluster is durable (fsync on).
# DEVDB_HUGEPAGES=1 backs the cluster's shared memory with 2 MB huge pages
# (huge_pages=on) when the kernel has enough free; as root it reserves the
# missing ones first (vm.nr_hugepages, until reboot). Otherwise the cluster
# starts with 4 kB pages and says how to reserve them. `make bench` sets it:
# with 4 kB pages every backend maps each shared buffer it touches for the
# first time with a page fault of its own, which with 150 backends reading
# different rows of one table cost more CPU than the reads (docs/architecture.md, "Member storm").
#
# Data lives under .pgq-dev/NAME in the checkout (git-ignored). PostgreSQL refuses
# to run as root, so as root the cluster runs as the OS user `postgres` (created
# by Debian's package) or, failing that, a `pgqdev` user made here.
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
cmd=${1:-}
name=${2:-dev}
port=${3:-25432}
base="$here/.pgq-dev"
dir="$base/$name"

log() { echo "devdb: $*" >&2; }

find_bindir() {
  local d
  if command -v pg_config >/dev/null 2>&1; then
    d=$(pg_config --bindir 2>/dev/null || true)
    [ -x "$d/initdb" ] && [ -x "$d/pg_ctl" ] && { echo "$d"; return 0; }
  fi
  for d in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r); do
    [ -x "$d/initdb" ] && [ -x "$d/pg_ctl" ] && { echo "$d"; return 0; }
  done
  if command -v initdb >/dev/null 2>&1 && command -v pg_ctl >/dev/null 2>&1; then
    dirname "$(command -v initdb)"; return 0
  fi
  return 1
}

ensure_postgres() {
  if bindir=$(find_bindir); then return 0; fi
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    log "PostgreSQL server binaries not found; installing the OS package (apt-get install -y postgresql)"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >&2
    bindir=$(find_bindir) && return 0
  fi
  cat >&2 <<'MSG'
devdb: PostgreSQL server binaries (initdb, pg_ctl) were not found.
  Debian/Ubuntu:  sudo apt-get install -y postgresql
  Fedora/RHEL:    sudo dnf install -y postgresql-server
  macOS:          brew install postgresql@16
Or point the suite at an existing server: DATABASE_URL=postgres://user@host/db make test
MSG
  exit 1
}

# run_as USER CMD... runs a command as the cluster owner.
run_pg() {
  # 9>&- : the server must not inherit (and hold forever) the start lock.
  if [ "$(id -u)" = 0 ]; then
    runuser -u "$pguser" -- "$@" 9>&-
  else
    "$@" 9>&-
  fi
}

pick_user() {
  if [ "$(id -u)" != 0 ]; then pguser=$(id -un); return; fi
  if id postgres >/dev/null 2>&1; then pguser=postgres; return; fi
  if ! id pgqdev >/dev/null 2>&1; then
    useradd --system --no-create-home --shell /usr/sbin/nologin pgqdev
  fi
  pguser=pgqdev
}

# The cluster owner must be able to reach the data folder; a checkout under a
# private home (e.g. /root) is not reachable, so fall back to a folder in /tmp.
pick_dir() {
  mkdir -p "$base"
  if [ "$(id -u)" = 0 ] && ! runuser -u "$pguser" -- test -x "$base" 2>/dev/null; then
    local alt="/tmp/pgq-dev-$(echo "$here" | cksum | cut -d' ' -f1)"
    mkdir -p "$alt"
    ln -sfn "$alt/$name" "$base/$name.link"
    dir="$alt/$name"
  fi
}

url() { echo "postgres://postgres@127.0.0.1:$port/postgres?sslmode=disable"; }

# hugepages OPTS: adds huge_pages=on to opts when the kernel has enough free
# 2 MB pages for the cluster (reserving the missing ones as root), else
# huge_pages=off with a note on how to reserve them.
hugepages() {
  local need free total
  need=$(run_pg "$bindir/postgres" -D "$dir/data" $1 -c huge_pages=on -C shared_memory_size_in_huge_pages 2>/dev/null || echo 0)
  free=$(awk '/^HugePages_Free:/ {print $2}' /proc/meminfo 2>/dev/null || echo 0)
  total=$(cat /proc/sys/vm/nr_hugepages 2>/dev/null || echo 0)
  if [ "${need:-0}" -gt 0 ] && [ "${free:-0}" -lt "$need" ] && [ "$(id -u)" = 0 ]; then
    if echo $((total + need - free)) >/proc/sys/vm/nr_hugepages 2>/dev/null; then
      log "reserved $((need - free)) huge pages of 2 MB for cluster $name (vm.nr_hugepages $total -> $((total + need - free)), until reboot)"
      free=$(awk '/^HugePages_Free:/ {print $2}' /proc/meminfo)
    fi
  fi
  if [ "${need:-0}" -gt 0 ] && [ "${free:-0}" -ge "$need" ]; then
    opts="$opts -c huge_pages=on"
    log "cluster $name: shared memory in huge pages ($need of 2 MB)"
  elif [ "${need:-0}" -gt 0 ]; then
    opts="$opts -c huge_pages=off"
    log "cluster $name: shared memory in 4 kB pages: $need huge pages of 2 MB needed, ${free:-0} free (as root: sysctl -w vm.nr_hugepages=$((total + need)))"
  else
    opts="$opts -c huge_pages=off"
    log "cluster $name: shared memory in 4 kB pages (postgres -C shared_memory_size_in_huge_pages gave no count)"
  fi
}

case "$cmd" in
  url) url ;;
  start)
    ensure_postgres
    pick_user
    pick_dir
    # Test binaries of several packages may start the same cluster at once.
    if command -v flock >/dev/null 2>&1; then
      exec 9>"$base/$name.lock"
      flock 9
    fi
    mkdir -p "$dir"
    [ "$(id -u)" = 0 ] && chown "$pguser" "$dir"
    if [ ! -f "$dir/data/PG_VERSION" ]; then
      log "initdb $dir/data (as $pguser, binaries in $bindir)"
      run_pg "$bindir/initdb" -D "$dir/data" -A trust -U postgres -E UTF8 --no-locale >"$dir/initdb.log" 2>&1 \
        || { cat "$dir/initdb.log" >&2; exit 1; }
    fi
    if run_pg "$bindir/pg_ctl" -D "$dir/data" status >/dev/null 2>&1; then
      log "cluster $name already running"
    else
      opts="-p $port -c listen_addresses=127.0.0.1 -k $dir -c max_connections=300 -c shared_buffers=256MB"
      opts="$opts -c max_locks_per_transaction=256 -c max_prepared_transactions=20 ${DEVDB_OPTS:-}"
      if [ "${DEVDB_HUGEPAGES:-0}" = 1 ]; then
        hugepages "$opts"
      fi
      if [ "$name" = test ]; then
        # throwaway test data: durability buys nothing here
        opts="$opts -c fsync=off -c full_page_writes=off -c synchronous_commit=off"
      fi
      # The port lies in Linux's ephemeral range (32768-60999): an outgoing
      # connection of any process may hold it for a moment. Retry that case.
      for attempt in 1 2 3 4 5 6; do
        before=$( (wc -c <"$dir/server.log") 2>/dev/null || echo 0)
        if run_pg "$bindir/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 -o "$opts" start >/dev/null; then
          break
        fi
        if [ "$attempt" -lt 6 ] && tail -c +"$((before + 1))" "$dir/server.log" | grep -q "Address already in use"; then
          log "port $port is taken for now (attempt $attempt); retrying"
          sleep 2
          continue
        fi
        tail -20 "$dir/server.log" >&2
        exit 1
      done
      log "cluster $name listening on 127.0.0.1:$port"
    fi
    url
    ;;
  crash|promote|destroy)
    pick_user
    for d in "$dir" "$(readlink -f "$base/$name.link" 2>/dev/null || true)"; do
      [ -n "$d" ] && [ -f "$d/data/PG_VERSION" ] || continue
      bindir=$(find_bindir) || exit 1
      case "$cmd" in
        crash) run_pg "$bindir/pg_ctl" -D "$d/data" -m immediate -w stop >/dev/null ;;
        promote) run_pg "$bindir/pg_ctl" -D "$d/data" -w -t 60 promote >/dev/null ;;
        destroy)
          run_pg "$bindir/pg_ctl" -D "$d/data" -m immediate -w stop >/dev/null 2>&1 || true
          rm -rf "$d/data" ;;
      esac
    done
    ;;
  standby)
    primary_port=${4:?usage: $0 standby NAME PORT PRIMARY_PORT}
    ensure_postgres
    pick_user
    pick_dir
    mkdir -p "$dir"
    [ "$(id -u)" = 0 ] && chown "$pguser" "$dir"
    if [ ! -f "$dir/data/PG_VERSION" ]; then
      log "pg_basebackup -R from 127.0.0.1:$primary_port into $dir/data"
      run_pg "$bindir/pg_basebackup" -h 127.0.0.1 -p "$primary_port" -U postgres -D "$dir/data" -R -X stream \
        --checkpoint=fast >"$dir/basebackup.log" 2>&1 || { cat "$dir/basebackup.log" >&2; exit 1; }
    fi
    "$0" start "$name" "$port"
    ;;
  stop)
    pick_user
    for d in "$dir" "$(readlink -f "$base/$name.link" 2>/dev/null || true)"; do
      [ -n "$d" ] && [ -f "$d/data/PG_VERSION" ] || continue
      bindir=$(find_bindir) || exit 0
      run_pg "$bindir/pg_ctl" -D "$d/data" -m fast -w stop >/dev/null 2>&1 || true
    done
    ;;
  reset)
    "$0" stop "$name"
    for d in "$dir" "$(readlink -f "$base/$name.link" 2>/dev/null || true)"; do
      if [ -n "$d" ] && [ -d "$d/data" ]; then rm -rf "$d/data"; fi
    done
    ;;
  *) echo "usage: $0 start|stop|reset|url|crash|standby|promote|destroy NAME [PORT [PRIMARY_PORT]]" >&2; exit 2 ;;
esac
