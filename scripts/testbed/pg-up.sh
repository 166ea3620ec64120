#!/bin/bash
set -euo pipefail
BASE=${BASE:-/tmp/tcl-testbed}; PGD=$BASE/pg; PGPORT=${PGPORT:-54329}; PGBIN=/usr/lib/postgresql/15/bin
mkdir -p $PGD && chown postgres:postgres $PGD          # initdb/postgres refuse to run as root
rm -rf $PGD/data
runuser -u postgres -- $PGBIN/initdb -D $PGD/data -U postgres -A trust -E UTF8 --locale=C.UTF-8 --no-sync >$PGD/initdb.log
# the server's options, kept for pg-outage.sh (which starts it again)
echo "-c listen_addresses=127.0.0.1 -p $PGPORT -c unix_socket_directories=$PGD -c fsync=off -c synchronous_commit=off -c full_page_writes=off" > $PGD/options
runuser -u postgres -- $PGBIN/pg_ctl -D $PGD/data -l $PGD/server.log -w -o "$(cat $PGD/options)" start >/dev/null
echo "postgresql://postgres@127.0.0.1:$PGPORT/postgres"
