#!/usr/bin/env bash
# The GPU truth check (issue 34): one command, from this working tree, no network, under 8
# minutes on a one-GPU machine. It prints a table of five rows (inventory, isolation,
# checkpoint, mfu, batchsize; `python -m bench.gpucheck --help`) and exits 1 if a row failed.
#
#   bash scripts/gpu-check.sh [--rows mfu,batchsize] [--deadline-s 450] [--out DIR]
#   JAX_PLATFORMS=cpu bash scripts/gpu-check.sh     # on a CPU: says which rows it skipped
#
# Python: $PYTHON, else this checkout's .venv, else python3 (a GPU image's, with JAX for CUDA).
# What that Python lacks of tcl's own dependencies (the shim's FastAPI, pydantic, omegaconf...)
# can come as wheels in .whl/ (scripts/gpu-check-wheels.sh downloads them where pip can reach
# PyPI): they are installed into a temp dir for this run only.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"
PY="${PYTHON:-}"
if [[ -z "$PY" ]]; then
  if [[ -x "$REPO/.venv/bin/python" ]]; then PY="$REPO/.venv/bin/python"; else PY="$(command -v python3)"; fi
fi
WORK="$(mktemp -d "${TMPDIR:-/tmp}/tcl-gpucheck.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
SITE=""
if ! "$PY" -c "import fastapi, omegaconf, pydantic, uvicorn" 2>/dev/null && compgen -G "$REPO/.whl/*.whl" >/dev/null; then
  SITE="$WORK/site"
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$SITE" "$REPO"/.whl/*.whl
fi
export PYTHONPATH="$REPO${SITE:+:$SITE}${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
# The shim starts runners as `tcl-runner` beside its interpreter when installed; from a bare
# checkout, this wrapper (the shim hands its runners an allow-listed environment without
# PYTHONPATH, so the wrapper sets it).
mkdir -p "$WORK/bin"
printf '#!/usr/bin/env bash\nPYTHONPATH=%q exec %q -m tcl.runner.main "$@"\n' "$PYTHONPATH" "$PY" >"$WORK/bin/tcl-runner"
chmod 755 "$WORK/bin/tcl-runner"
export TCL_GPUCHECK_RUNNER_BIN="$WORK/bin/tcl-runner"
"$PY" - <<'EOF' || true
import importlib.util
need = ["jax", "flax", "optax", "orbax.checkpoint", "omegaconf", "pydantic", "fastapi", "uvicorn", "httpx", "psutil"]
missing = [m for m in need if importlib.util.find_spec(m.split(".")[0]) is None]
if missing:
    print(f"gpu-check: this Python lacks {missing}; rows that need them will fail "
          "(carry them as wheels: scripts/gpu-check-wheels.sh)", flush=True)
EOF
"$PY" -m bench.gpucheck "$@"
