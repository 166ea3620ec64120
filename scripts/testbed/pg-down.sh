#!/bin/bash
BASE=${BASE:-/tmp/tcl-testbed}
runuser -u postgres -- /usr/lib/postgresql/15/bin/pg_ctl -D $BASE/pg/data -m immediate -w stop
