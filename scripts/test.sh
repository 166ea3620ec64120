#!/usr/bin/env bash
# The test command (README, .ci/run): set up, start the real services, lint, run every test.
#   bash scripts/test.sh [pytest args...]
set -euo pipefail
cd "$(dirname "$0")/.."
phases=()
t=$SECONDS
lap() { phases+=("$(printf '%-10s %5ss' "$1" "$((SECONDS - t))")"); t=$SECONDS; }
bash scripts/setup.sh
command -v uv >/dev/null || PATH="$(dirname "$(bash scripts/uv.sh)"):$PATH"  # scripts/uv.sh put it
lap setup
bash scripts/testbed/dockerd-up.sh
bash scripts/testbed/base-image.sh
lap services
uv run --locked ruff check .
uv run --locked ruff format --check .
uv run --locked mypy
lap lint
log=$(mktemp /tmp/tcl-pytest.XXXXXX)
set +e
# Tests wait on real services most of the time (one process: ~0.7 of 2 cores busy): workers
# run whole groups side by side (tests/conftest.py says which tests share one).
uv run --locked pytest -n "${TCL_TEST_WORKERS:-3}" --dist loadgroup "$@" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
set -e
lap pytest
printf '%s\n' "time per phase of scripts/test.sh:" "${phases[@]}"
tail -n 1 "$log"  # pytest's closing line stays the last one
rm -f "$log"
if [ "$rc" = 5 ]; then echo "pytest collected no tests"; exit 1; fi
exit "$rc"
