#!/usr/bin/env bash
# The test tiers on a busy machine: do they pass when every core is taken? (issue 27)
#   bash scripts/stress-test.sh [--integration] [--runs N] [--burners N] [pytest args...]
# Starts N CPU burners (8 by default: stress-ng, installed here when missing and root, else
# busy-loop Python processes), runs the unit tier --runs times in a row (3), and with
# --integration the integration tier once after them (3 xdist workers, as scripts/test.sh,
# which must have set up the machine once); then prints one line per run (its pytest closing
# line and seconds). The burners are stopped however the script ends.
# Exits non-zero when any run failed.
set -euo pipefail
cd "$(dirname "$0")/.."
runs=3
burners=8
integration=0
pytest_args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --integration) integration=1 ;;
    --runs) runs=$2; shift ;;
    --burners) burners=$2; shift ;;
    -h|--help) sed -n '2,8p' "$0"; exit 0 ;;
    *) pytest_args+=("$1") ;;
  esac
  shift
done
command -v uv >/dev/null || PATH="$(dirname "$(bash scripts/uv.sh)"):$PATH"

burner_pids=()
stop_burners() {
  for pid in "${burner_pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${burner_pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  burner_pids=()
}
trap stop_burners EXIT
trap 'exit 130' INT TERM

if ! command -v stress-ng >/dev/null && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  echo "installing stress-ng"
  apt-get install -y -qq stress-ng >/dev/null 2>&1 ||
    { apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq stress-ng >/dev/null 2>&1; } ||
    echo "could not install stress-ng: busy-loop Python processes instead"
fi
# Each burner also ends by itself after 3 hours, should this script be killed with SIGKILL.
if command -v stress-ng >/dev/null; then
  stress-ng --cpu "$burners" --timeout 3h --quiet &
  burner_pids+=($!)
  how="stress-ng --cpu $burners"
else
  for _ in $(seq "$burners"); do
    python3 -c 'import time
end = time.monotonic() + 3 * 3600
while time.monotonic() < end:
    pass' &
    burner_pids+=($!)
  done
  how="$burners busy-loop Python processes"
fi
echo "CPU burners: $how on $(nproc) cores"

results=()
failed=0
run_tier() {  # run_tier LABEL PATH [ARGS]: one pytest run of a tier, its closing line and time
  local label=$1 path=$2 log rc start
  shift 2
  log=$(mktemp /tmp/tcl-stress.XXXXXX)
  start=$SECONDS
  set +e
  uv run --locked pytest -q "$path" "$@" "${pytest_args[@]}" 2>&1 | tee "$log"
  rc=${PIPESTATUS[0]}
  set -e
  results+=("$(printf '%-14s rc=%-3s %5ss  %s' "$label" "$rc" "$((SECONDS - start))" "$(tail -n 1 "$log")")")
  [ "$rc" = 0 ] || failed=1
  rm -f "$log"
}

for i in $(seq "$runs"); do
  run_tier "unit run $i" tests/unit
done
if [ "$integration" = 1 ]; then
  bash scripts/testbed/dockerd-up.sh
  bash scripts/testbed/base-image.sh
  # as scripts/test.sh runs it: 3 xdist workers, grouped by testbed
  run_tier "integration" tests/integration -n "${TCL_TEST_WORKERS:-3}" --dist loadgroup
fi
stop_burners
echo "under load ($how on $(nproc) cores):"
printf '%s\n' "${results[@]}"
exit "$failed"
