#!/usr/bin/env bash
# A throwaway Citus cluster for tests and benchmarks: one coordinator and two workers on this
# machine's PostgreSQL binaries, as three private clusters under ROOT (never the system cluster).
# docs/performance.md#citus says how the service runs on Citus.
#
#   citus-cluster.sh start        initdb (first time) and start the three nodes; prints the ports
#   citus-cluster.sh setup DB     create DB and the citus extension on every node; register the
#                                 coordinator and add both workers
#   citus-cluster.sh drop DB      drop DB on every node (Citus does not propagate CREATE/DROP DATABASE)
#   citus-cluster.sh ports        the three ports: coordinator worker1 worker2
#   citus-cluster.sh psql NODE …  psql on node c, w1 or w2 (the rest goes to psql)
#   citus-cluster.sh stop         stop the three nodes (pg_ctl -m fast)
#   citus-cluster.sh destroy      stop, then remove ROOT's data, sockets and logs
#
# Env: ROOT (default /tmp/contacts-citus), PORTS "C W1 W2" (default: three free ports, chosen at the
# first start and kept in ROOT/ports), CITUS_SHARD_COUNT (default 32, Citus's own), PGBIN (default
# `pg_config --bindir`). The nodes run as the postgres OS user (runuser when run as root) with trust
# on loopback only, so DATABASE_URL=postgres://postgres@127.0.0.1:C/DB needs no password.
set -euo pipefail
ROOT=${ROOT:-/tmp/contacts-citus}
PGBIN=${PGBIN:-$(pg_config --bindir)}
SOCK=$ROOT/sock
NODES=(c w1 w2)

as_pg() { if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }

port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
choose_ports() {
  if [ -n "${PORTS:-}" ]; then echo "$PORTS"; return; fi
  if [ -f "$ROOT/ports" ]; then cat "$ROOT/ports"; return; fi
  local chosen=() p
  for p in $(shuf -i 20000-29999 -n 50); do
    port_free "$p" && chosen+=("$p")
    [ ${#chosen[@]} -eq 3 ] && break
  done
  echo "${chosen[*]}"
}
read -r PC PW1 PW2 <<<"$(choose_ports)"
declare -A PORT=([c]=$PC [w1]=$PW1 [w2]=$PW2)

datadir() { echo "$ROOT/data/$1"; }
psql_on() {
  local node=$1
  shift
  as_pg "$PGBIN/psql" -X -q -v ON_ERROR_STOP=1 -h "$SOCK" -p "${PORT[$node]}" -U postgres "$@"
}

init_node() {
  local node=$1 dir
  dir=$(datadir "$node")
  [ -f "$dir/PG_VERSION" ] && return 0
  mkdir -p "$dir"
  chown postgres:postgres "$dir" 2>/dev/null || true
  as_pg "$PGBIN/initdb" -D "$dir" -U postgres --auth=trust --no-instructions >"$ROOT/logs/initdb-$node.log"
  cat >>"$dir/postgresql.conf" <<EOF
# --- throwaway Citus node (scripts/citus-cluster.sh) ---
port = ${PORT[$node]}
listen_addresses = '127.0.0.1'
unix_socket_directories = '$SOCK'
shared_preload_libraries = 'citus'
# Citus commits a transaction that wrote on several nodes with two-phase commit.
max_prepared_transactions = 200
# Each coordinator session opens its own connections to the workers.
max_connections = 300
shared_buffers = 128MB
# citus_move_shard_placement(..., 'force_logical') copies a shard by logical replication.
wal_level = logical
citus.shard_count = ${CITUS_SHARD_COUNT:-32}
fsync = off
synchronous_commit = off
full_page_writes = off
log_min_messages = warning
EOF
}

start() {
  mkdir -p "$ROOT/data" "$ROOT/logs" "$SOCK"
  chmod 0755 "$ROOT" "$ROOT/data"
  chmod 0777 "$ROOT/logs"
  chown postgres:postgres "$ROOT/data" "$SOCK" 2>/dev/null || true
  echo "$PC $PW1 $PW2" >"$ROOT/ports"
  local n
  for n in "${NODES[@]}"; do init_node "$n"; done
  for n in "${NODES[@]}"; do
    [ -f "$(datadir "$n")/postmaster.pid" ] && continue
    as_pg "$PGBIN/pg_ctl" -D "$(datadir "$n")" -l "$ROOT/logs/$n.log" -w -t 60 start >/dev/null
  done
  echo "citus cluster under $ROOT: coordinator 127.0.0.1:$PC, workers 127.0.0.1:$PW1 127.0.0.1:$PW2"
}

setup() {
  local db=${1:?setup DB} n
  for n in "${NODES[@]}"; do
    psql_on "$n" -d postgres -c "create database \"$db\"" 2>/dev/null || true
    psql_on "$n" -d "$db" -c "create extension if not exists citus"
  done
  psql_on c -d "$db" -o /dev/null <<SQL
select citus_set_coordinator_host('127.0.0.1', $PC);
select citus_add_node('127.0.0.1', $PW1);
select citus_add_node('127.0.0.1', $PW2);
SQL
}

drop() {
  local db=${1:?drop DB} n
  for n in "${NODES[@]}"; do psql_on "$n" -d postgres -c "drop database if exists \"$db\" with (force)"; done
}

stop() {
  local n dir
  for n in "${NODES[@]}"; do
    dir=$(datadir "$n")
    [ -f "$dir/postmaster.pid" ] && as_pg "$PGBIN/pg_ctl" -D "$dir" -m fast -w stop >/dev/null
  done
  return 0
}

case ${1:-} in
  start) start ;;
  setup) setup "${2:-}" ;;
  drop) drop "${2:-}" ;;
  ports) echo "$PC $PW1 $PW2" ;;
  psql)
    node=${2:?psql NODE}
    shift 2
    psql_on "$node" "$@"
    ;;
  stop) stop ;;
  destroy)
    stop
    rm -rf "$ROOT/data" "$ROOT/logs" "$SOCK" "$ROOT/ports"
    rmdir "$ROOT" 2>/dev/null || true
    ;;
  *)
    echo "usage: $0 start|setup DB|drop DB|ports|psql NODE [ARGS]|stop|destroy" >&2
    exit 2
    ;;
esac
