#!/usr/bin/env bash
# Restores a PostgreSQL data directory from the pgBackRest repository to a point in time: the newest
# backup before it, then the archived WAL up to it; PostgreSQL, once started, replays to that moment
# and promotes itself (a new timeline). docs/operations.md ("Restoring to a point in time") is the
# runbook around it: what to stop first, and what to do after.
#
#   scripts/restore-to-time.sh --stanza contacts --target '2026-11-28 12:00:00+00' [--config /etc/pgbackrest.conf]
#
# Run it as the data directory's owner (postgres) on the node to restore, with PostgreSQL stopped.
# The data directory is pg1-path of the stanza's configuration; existing files are reused where
# they match the backup (--delta), everything else is replaced.
set -euo pipefail

usage() {
  echo "usage: $0 --stanza NAME --target 'YYYY-MM-DD HH:MM:SS[.ffffff]+ZZ' [--config FILE]" >&2
  exit 2
}

stanza=
target=
config=/etc/pgbackrest.conf
while [ $# -gt 0 ]; do
  case $1 in
    --stanza) stanza=${2:-}; shift 2 ;;
    --target) target=${2:-}; shift 2 ;;
    --config) config=${2:-}; shift 2 ;;
    *) usage ;;
  esac
done
[ -n "$stanza" ] && [ -n "$target" ] || usage
# PostgreSQL reads the target as a timestamp with time zone; one without a zone would be read in
# the server's, which is a guess.
if ! [[ $target =~ ^[0-9]{4}-[0-9]{2}-[0-9]{2}[\ T][0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]+)?([+-][0-9]{2}(:?[0-9]{2})?|Z)$ ]]; then
  echo "--target must be a time with its zone, e.g. '2026-11-28 12:00:00+00'" >&2
  exit 2
fi

pgbackrest() { command pgbackrest --config="$config" --stanza="$stanza" "$@"; }

# pgBackRest refuses to restore over a running server too; this says what to do about it.
data=$(pgbackrest --output=text info >/dev/null && sed -n 's/^pg1-path=//p' "$config" | tail -n1)
if [ -f "$data/postmaster.pid" ] && kill -0 "$(head -n1 "$data/postmaster.pid")" 2>/dev/null; then
  echo "PostgreSQL is running on $data: stop it first (with Patroni: stop Patroni on every node)" >&2
  exit 1
fi

started=$(date +%s)
pgbackrest --delta --type=time --target="$target" --target-action=promote restore
echo "restored $data to $target in $(($(date +%s) - started)) s; start PostgreSQL: it replays the archived WAL up to then and promotes"
