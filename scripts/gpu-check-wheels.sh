#!/usr/bin/env bash
# Download into .whl/ the wheels of what a JAX GPU image lacks of tcl's own dependencies (the
# shim's and runner's FastAPI stack, pydantic, omegaconf, docker's client), at uv.lock's
# versions, for the image's Python (default 3.12, x86-64). scripts/gpu-check.sh installs them
# into a temp dir for its run. Needs pip and PyPI here, not there. .whl/ is git-ignored.
#
#   bash scripts/gpu-check-wheels.sh [PYTHON_VERSION]
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYVER="${1:-3.12}"
NAMES="pydantic pydantic-core annotated-types typing-inspection typing-extensions fastapi starlette
opentelemetry-api annotated-doc uvicorn websockets docker omegaconf"
cd "$REPO"
UV="$(bash scripts/uv.sh)"
pins=$("$UV" export --frozen --no-dev --no-hashes --no-emit-project --all-extras 2>/dev/null | sed 's/ *;.*//')
reqs=()
for n in $NAMES; do
  line=$(grep -i "^${n}==" <<<"$pins" || true)
  [[ -n "$line" ]] || { echo "gpu-check-wheels: $n is not in uv.lock" >&2; exit 1; }
  reqs+=("$line")
done
rm -rf .whl && mkdir -p .whl
python3 -m pip download -q --no-deps --only-binary=:all: --python-version "$PYVER" --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  --platform manylinux1_x86_64 -d .whl "${reqs[@]}"
ls .whl
