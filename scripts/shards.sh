#!/usr/bin/env bash
# shards.sh — `make shards`: pgq on 1, 2 and 4 shard clusters (docs/scaling-out.md).
#
#   scripts/shards.sh BASE_PORT
#
# Starts the directory cluster (shards-dir, BASE_PORT) and four shard clusters
# (shards-0..3, BASE_PORT+1..+4), each shard cluster in a cgroup of its own
# so that the bench (cmd/pgq-shards bench) can cap each to the same CPU share
# (SHARDS_CPU cores, default 0.1, per SHARDS_PERIOD, default 10ms: the
# cluster runs 1 ms, then waits for the next period): cgroup v2 cpu.max where the cpu controller
# is there, else cgroup v1 cpu.cfs_quota_us; as root only. Where neither can
# be written it says exactly why and measures uncapped. The clusters run with
# synchronous_commit off (CPU, not the shared disk's flushes, is what the
# shards divide). The last run stops shards-3 at once mid-run (kill-one:
# the other shards' rate after vs before). Everything is stopped at the end. Needs PL/Proxy (installed
# as root by scripts/deps.sh ensure plproxy).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
base=${1:?usage: $0 BASE_PORT}
cpu=${SHARDS_CPU:-0.1}
seconds=${SHARDS_SECONDS:-10}
period=${SHARDS_PERIOD:-10ms}

log() { echo "shards: $*" >&2; }

scripts/deps.sh ensure plproxy || { echo "make shards: PL/Proxy is missing (see above)" >&2; exit 1; }

clusters=(shards-dir shards-0 shards-1 shards-2 shards-3)
cgdirs=()
cleanup() {
  for c in "${clusters[@]}"; do scripts/devdb.sh stop "$c" >/dev/null 2>&1 || true; done
  if [ -n "$cgroot" ] && [ -d "$cgroot/gen" ]; then
    echo $$ >"$(dirname "$cgroot")/cgroup.procs" 2>/dev/null || true
  fi
  for d in "${cgdirs[@]}"; do rmdir "$d" 2>/dev/null || true; done
  rmdir "$cgroot" 2>/dev/null || true
}
cgroot=""
trap cleanup EXIT

export DEVDB_OPTS="-c synchronous_commit=off -c shared_buffers=128MB"
dir_url=$(scripts/devdb.sh start shards-dir "$base")
shard_urls=()
for i in 0 1 2 3; do
  shard_urls+=("$(scripts/devdb.sh start "shards-$i" $((base + 1 + i)))")
done

# Which cgroup interface caps CPU here.
kind=none
note=""
if [ "$(id -u)" != 0 ]; then
  note="not root: cgroup folders under /sys/fs/cgroup cannot be made (run make shards as root)"
elif [ -f /sys/fs/cgroup/cgroup.controllers ] && grep -qw cpu /sys/fs/cgroup/cgroup.controllers; then
  cgroot=/sys/fs/cgroup/pgq-shards-$base
  if mkdir -p "$cgroot" 2>/dev/null && echo +cpu >/sys/fs/cgroup/cgroup.subtree_control 2>/dev/null \
     && echo +cpu >"$cgroot/cgroup.subtree_control" 2>/dev/null; then
    kind=v2
  else
    note="cgroup v2 has the cpu controller but $cgroot (or cgroup.subtree_control) cannot be written"
  fi
elif [ -d /sys/fs/cgroup/cpu ] && [ -f /sys/fs/cgroup/cpu/cpu.cfs_quota_us ]; then
  cgroot=/sys/fs/cgroup/cpu/pgq-shards-$base
  if mkdir -p "$cgroot" 2>/dev/null; then
    kind=v1
  else
    note="cgroup v1 cpu controller at /sys/fs/cgroup/cpu but $cgroot cannot be made (read-only?)"
  fi
elif [ -f /sys/fs/cgroup/unified/cgroup.controllers ]; then
  note="no writable cpu controller: cgroup v2 (/sys/fs/cgroup/unified) has only '$(cat /sys/fs/cgroup/unified/cgroup.controllers)', and no cgroup v1 cpu hierarchy is mounted"
else
  note="no cgroup cpu controller is mounted under /sys/fs/cgroup"
fi

pgbin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
# into_cgroup DIR URL: the cluster's postmaster and the processes it already
# started; backends it forks later inherit its cgroup.
into_cgroup() {
  local datadir pm p
  datadir=$("$pgbin/psql" "$2" -Atc 'SHOW data_directory')
  pm=$(head -1 "$datadir/postmaster.pid")
  echo "$pm" >"$1/cgroup.procs"
  for p in $(ps -o pid= --ppid "$pm"); do
    echo "$p" >"$1/cgroup.procs" 2>/dev/null || true # a child that exited meanwhile (ESRCH)
  done
  log "cluster on $2 (postmaster $pm) in cgroup $1"
}
if [ "$kind" != none ]; then
  # Every other process of the machine competes with this whole group at
  # the root: at the default weight (one task's) a busy machine would give
  # all shards together one task's share, whatever N is, and no cap would
  # ever bind. So while capped the bench gives the group the weight of 64
  # tasks (uncapped: one task's again); inside it the shards (capped) and
  # gen (the load generator and the directory/proxy cluster) weigh the same.
  for i in 0 1 2 3; do
    d="$cgroot/s$i"
    mkdir -p "$d"
    cgdirs+=("$d")
    into_cgroup "$d" "${shard_urls[$i]}"
  done
  mkdir -p "$cgroot/gen"
  cgdirs+=("$cgroot/gen")
  into_cgroup "$cgroot/gen" "$dir_url"
  echo $$ >"$cgroot/gen/cgroup.procs"
fi
cgdirs_csv=$(IFS=,; echo "${cgdirs[*]:0:4}")
shards_csv=$(IFS=,; echo "${shard_urls[*]}")

go build -o bin/pgq-shards ./cmd/pgq-shards
# The cgroup folders go before the clusters stop (cleanup): empty first.
bin/pgq-shards bench -directory-url "$dir_url" -shard-urls "$shards_csv" -cgroup-kind "$kind" \
  -cgroup-dirs "$cgdirs_csv" -cap-note "$note" -cpu "$cpu" -period "$period" -seconds "$seconds" \
  -kill-cmd "scripts/devdb.sh crash shards-3"
