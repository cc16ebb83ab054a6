#!/usr/bin/env bash
# pgbouncer.sh — a throwaway PgBouncer in transaction pooling mode for tests.
#
#   scripts/pgbouncer.sh start PORT HOST DBPORT USER [PASSWORD]
#       start (or reuse) PgBouncer on 127.0.0.1:PORT in front of the server at
#       HOST:DBPORT; every database name is passed through (* = ...), clients
#       log in as USER without a password (PgBouncer uses PASSWORD, if any,
#       towards the server). Prints the URL of database `postgres` through it.
#   scripts/pgbouncer.sh stop [PORT]
#
# Installs Debian's pgbouncer as root when missing (scripts/deps.sh), else
# fails saying what to install. PgBouncer refuses to run as root, so as root
# it runs as the OS user `postgres` (as the throwaway clusters do).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cmd=${1:-}
port=${2:-25443}

log() { echo "pgbouncer.sh: $*" >&2; }
dir="/tmp/pgq-pgbouncer-$port"

as_owner() {
  if [ "$(id -u)" = 0 ]; then runuser -u "$owner" -- "$@"; else "$@"; fi
}
owner=$(id -un)
if [ "$(id -u)" = 0 ]; then
  if id postgres >/dev/null 2>&1; then owner=postgres; else owner=nobody; fi
fi

running() { [ -f "$dir/pgbouncer.pid" ] && kill -0 "$(cat "$dir/pgbouncer.pid")" 2>/dev/null; }

case "$cmd" in
  start)
    host=${3:?usage: $0 start PORT HOST DBPORT USER [PASSWORD]}
    dbport=${4:?}; user=${5:?}; password=${6:-}
    "$here/scripts/deps.sh" ensure pgbouncer
    bin=$(command -v pgbouncer || echo /usr/sbin/pgbouncer)
    if running; then
      log "PgBouncer on 127.0.0.1:$port already running"
    else
      mkdir -p "$dir"
      [ "$(id -u)" = 0 ] && chown "$owner" "$dir"
      conn="host=$host port=$dbport user=$user"
      [ -n "$password" ] && conn="$conn password=$password"
      as_owner tee "$dir/pgbouncer.ini" >/dev/null <<INI
[databases]
* = $conn

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $port
unix_socket_dir = $dir
auth_type = trust
auth_file = $dir/userlist.txt
pool_mode = transaction
max_client_conn = 500
default_pool_size = 20
ignore_startup_parameters = extra_float_digits
logfile = $dir/pgbouncer.log
pidfile = $dir/pgbouncer.pid
INI
      echo "\"$user\" \"\"" | as_owner tee "$dir/userlist.txt" >/dev/null
      # The port may be held for a moment by an outgoing connection (it can
      # lie in the ephemeral range): try a few times.
      for attempt in 1 2 3 4 5 6; do
        as_owner "$bin" -d "$dir/pgbouncer.ini" || true
        for _ in $(seq 1 50); do running && break; sleep 0.1; done
        running && break
        [ "$attempt" -lt 6 ] && { log "PgBouncer did not start (attempt $attempt); retrying"; sleep 2; }
      done
      running || { log "PgBouncer did not start:"; tail -20 "$dir/pgbouncer.log" >&2; exit 1; }
      log "PgBouncer (transaction pooling) on 127.0.0.1:$port -> $host:$dbport"
    fi
    echo "postgres://$user@127.0.0.1:$port/postgres?sslmode=disable"
    ;;
  stop)
    if running; then
      kill "$(cat "$dir/pgbouncer.pid")"
      for _ in $(seq 1 50); do running || break; sleep 0.1; done
    fi
    ;;
  *) echo "usage: $0 start PORT HOST DBPORT USER [PASSWORD] | stop [PORT]" >&2; exit 2 ;;
esac
