#!/usr/bin/env bash
# The test command (README, .ci/run): set up, start the real services, lint, run every test.
#   bash scripts/test.sh [pytest args...]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
command -v uv >/dev/null || PATH="$(dirname "$(bash scripts/uv.sh)"):$PATH"  # scripts/uv.sh put it
bash scripts/testbed/dockerd-up.sh
bash scripts/testbed/base-image.sh
uv run --locked ruff check .
uv run --locked ruff format --check .
uv run --locked mypy
set +e
uv run --locked pytest "$@"
rc=$?
set -e
if [ "$rc" = 5 ]; then echo "pytest collected no tests"; exit 1; fi
exit "$rc"
