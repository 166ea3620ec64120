#!/usr/bin/env bash
# Starts dockerd if none answers (no systemd here). Never stops or replaces a running daemon.
set -euo pipefail
DOCKER=/usr/bin/docker   # Debian's client; /usr/local/bin/docker may lack BuildKit
if ! $DOCKER info >/dev/null 2>&1; then
  # A previous --bridge none daemon may have deleted docker0; dockerd recreates it on start.
  nohup dockerd >/tmp/tcl-dockerd.log 2>&1 &
  for _ in $(seq 150); do $DOCKER info >/dev/null 2>&1 && break; sleep 0.2; done
fi
$DOCKER info >/dev/null
echo "dockerd ok"
