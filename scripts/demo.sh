#!/usr/bin/env bash
# The main-job command, for now: set up, start the runner locally (a process, not docker) and run
# a small sample job through its HTTP API, printing its logs as they arrive (WebSocket).
# Honest scope: this drives the runner directly; once the control plane lands, `tcl submit`
# on the embedded local host replaces it.
set -euo pipefail
cd "$(dirname "$0")/.."
work=$(mktemp -d /tmp/tcl-demo.XXXXXX)
bash scripts/setup.sh >"$work/setup.log" 2>&1 || { cat "$work/setup.log" >&2; exit 1; }
cleanup() {
  if [ -n "${runner_pid:-}" ]; then kill "$runner_pid" 2>/dev/null || true; wait "$runner_pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT
uv run --locked tcl-runner serve --host 127.0.0.1 --port 0 --port-file "$work/port" \
  --state-dir "$work/state" &
runner_pid=$!
for _ in $(seq 300); do [ -s "$work/port" ] && break; sleep 0.05; done
[ -s "$work/port" ] || { echo "runner did not start" >&2; exit 1; }
uv run --locked python scripts/runner_demo.py "http://127.0.0.1:$(cat "$work/port")"
