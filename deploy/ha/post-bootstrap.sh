#!/bin/sh
# Run once by Patroni on the first leader, after initdb: the service's role and database, and the
# pgBackRest stanza with a first full backup (WAL archiving already runs).
set -eu
psql -v ON_ERROR_STOP=1 -d postgres <<SQL
create role contacts login password '${POSTGRES_PASSWORD:?}';
create database contacts owner contacts;
SQL
pgbackrest --stanza=contacts stanza-create
pgbackrest --stanza=contacts --type=full backup
