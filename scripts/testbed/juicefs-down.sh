#!/bin/bash
# Stops the tests' redis-server and removes the volume's storage (juicefs-up.sh).
BASE=${BASE:-/tmp/tcl-testbed}; D=$BASE/juicefs
if [ -f $D/redis.pid ]; then
  pid=$(cat $D/redis.pid); kill "$pid" 2>/dev/null
  for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
fi
rm -rf "$D"
true
