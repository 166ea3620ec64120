#!/bin/bash
# The PostgreSQL of pg-up.sh goes away for DOWN_S seconds (a fast stop: every connection is
# dropped, as in a restart or a failover), then comes back with the same data and options.
set -euo pipefail
BASE=${BASE:-/tmp/tcl-testbed}; PGD=$BASE/pg; PGBIN=/usr/lib/postgresql/15/bin
runuser -u postgres -- $PGBIN/pg_ctl -D $PGD/data -m fast -w stop >/dev/null
sleep "${DOWN_S:-0}"   # the outage itself
runuser -u postgres -- $PGBIN/pg_ctl -D $PGD/data -l $PGD/server.log -w -o "$(cat $PGD/options)" start >/dev/null
