#!/bin/sh
# backup-if-leader.sh full|diff|incr: a pgBackRest backup of this node when Patroni says it leads
# (GET /primary answers 200 on the leader only), nothing on a standby.
set -eu
type=${1:?full, diff or incr}
if [ "$(curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:8008/primary)" = 200 ]; then
  exec pgbackrest --stanza=contacts --type="$type" backup
fi
