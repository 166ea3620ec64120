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
# the services start while lint runs (the image build waits on dockerd and the disk, lint on a
# core): their output is shown once both are done
services_log=$(mktemp /tmp/tcl-services.XXXXXX)
(bash scripts/testbed/dockerd-up.sh && bash scripts/testbed/base-image.sh) >"$services_log" 2>&1 &
services=$!
lint_rc=0
{ uv run --locked ruff check . && uv run --locked ruff format --check . && uv run --locked mypy; } ||
  lint_rc=$?
lap lint
services_rc=0
wait "$services" || services_rc=$?
cat "$services_log" && rm -f "$services_log"
lap services
if [ "$lint_rc" != 0 ]; then echo "lint failed"; exit "$lint_rc"; fi
if [ "$services_rc" != 0 ]; then echo "the test services did not start"; exit "$services_rc"; fi
log=$(mktemp /tmp/tcl-pytest.XXXXXX)
set +e
# Tests wait on real services most of the time (one process: ~0.7 of 2 cores busy): workers
# run whole groups side by side (tests/conftest.py says which tests share one).
# Under `coverage run` (pyproject.toml [tool.coverage]): the processes the tests start are
# measured too.
rm -rf test-artefacts/coverage && mkdir -p test-artefacts/coverage
TCL_TEST_DURATIONS="$PWD/test-artefacts/durations.json" uv run --locked coverage run -m pytest -n "${TCL_TEST_WORKERS:-4}" --dist loadgroup --durations=40 "$@" 2>&1 |
  tee "$log"
rc=${PIPESTATUS[0]}
set -e
lap pytest
uv run --locked coverage combine -q || true
# what combine left is unreadable (a process killed while saving: the fault tests SIGKILL agents)
left=$(find test-artefacts/coverage -name '.coverage.*' | wc -l)
if [ "$left" -gt 0 ]; then
  echo "coverage: $left data file(s) of killed processes left out"
  find test-artefacts/coverage -name '.coverage.*' -delete
fi
echo "the least covered modules of tcl/ (all: uv run coverage report):"
uv run --locked coverage report --sort=cover | sed -n '3,12p' || true
total=$(uv run --locked coverage report --format=total --precision=0 2>/dev/null || echo 0)
echo "coverage of tcl/ (every process the tests started from this venv): $total%"
# the whole suite must keep the floor (a subset, `scripts/test.sh ARGS`, is not held to it)
floor=90  # 91 % on 28 Nov 2026 (issue 27)
if [ $# = 0 ] && [ "$rc" = 0 ] && [ "$total" -lt "$floor" ]; then
  echo "coverage $total% is under the floor of $floor% (scripts/test.sh)"
  rc=1
fi
lap coverage
printf '%s\n' "time per phase of scripts/test.sh:" "${phases[@]}"
tail -n 1 "$log"  # pytest's closing line stays the last one
rm -f "$log"
if [ "$rc" = 5 ]; then echo "pytest collected no tests"; exit 1; fi
exit "$rc"
