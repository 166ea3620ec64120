#!/usr/bin/env bash
# The main-job command: set up only what the job needs (uv, the project's runtime environment
# with the `jobs` extra: JAX, flax, optax, Orbax; no dev tools, no system packages, no root), then
# run a sample job and a tiny GPT through `tcl submit` on the local default (no config: one
# `local` host, an embedded shim with the process executor; no SSH, no Docker), following their
# logs live, then show `tcl ps` and the kept logs.
# Everything goes to a throw-away state dir; your own ~/.config/tcl and ~/.local/share/tcl are
# not touched. The test command (scripts/test.sh) is the one that installs the test lab.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
t0=$SECONDS
say() { printf '[setup %3ss] %s\n' "$((SECONDS - t0))" "$*" >&2; }
work=$(mktemp -d /tmp/tcl-demo.XXXXXX)
# uv must trust the same CAs as the host (TLS-intercepting proxies)
if [ -z "${SSL_CERT_FILE:-}" ] && [ -f /etc/ssl/certs/ca-certificates.crt ]; then
  export SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt
fi
say "finding uv"
uv=$(bash scripts/uv.sh)
say "uv: $uv ($("$uv" --version))"
say "syncing the runtime environment (.venv: tcl + jax, flax, optax, orbax; no dev tools)"
# --inexact: a developer's .venv keeps its dev tools; --no-dev: a fresh one gets none
UV_PYTHON_DOWNLOADS=never UV_COMPILE_BYTECODE=1 \
  "$uv" sync --locked --inexact --no-dev --extra jobs --python "$(command -v python3)" \
  >"$work/setup.log" 2>&1 || { cat "$work/setup.log" >&2; exit 1; }
say "ready"
export TCL_STATE_DIR="$work/state" TCL_CONFIG="$work/config.yaml"
: >"$TCL_CONFIG"   # an empty config = the local default
cleanup() {
  "$repo/.venv/bin/tcl" serve --stop >/dev/null 2>&1 || true  # the submits' daemon
  "$repo/.venv/bin/python" -c \
    'import os, pathlib; from tcl.control.localshim import stop_local_shim; stop_local_shim(pathlib.Path(os.environ["TCL_STATE_DIR"]) / "local-shim")' || true
  rm -rf "$work"
}
trap cleanup EXIT
mkdir "$work/project"
! command -v git >/dev/null || git -C "$work/project" init -q  # a repo, as yours is
cat >"$work/project/sample_job.py" <<'PY'
"""A sample job: estimates pi by the Leibniz series, reporting progress as it goes."""
import os
import time

total, terms = 0.0, 2_000_000
for k in range(terms):
    total += (-1) ** k / (2 * k + 1)
    if k % 500_000 == 0:
        print(f"step {k:>9,}: pi ~ {4 * total:.6f}", flush=True)
        time.sleep(0.2)
print(f"done: pi ~ {4 * total:.8f} (run {os.environ.get('TCL_RUN_ID', '?')})")
PY
cp examples/tiny_gpt.yaml "$work/project/"
tcl() { (cd "$work/project" && "$repo/.venv/bin/tcl" "$@"); }
echo "$ tcl submit --name demo -- python3 sample_job.py"
tcl submit --name demo -- python3 sample_job.py
echo
# The main job: a tiny byte-level GPT trained with tcl.jobs (flax, optax, Orbax checkpoints),
# through the launcher that resumes from the latest checkpoint after a preemption.
echo "$ tcl submit --name tiny-gpt --job gpt/train --job-config tiny_gpt.yaml"
tcl submit --name tiny-gpt --job gpt/train --job-config tiny_gpt.yaml
echo
echo "$ tcl ps -a"
tcl ps -a
echo
echo "$ tcl logs tiny-gpt --tail 3   (kept locally)"
tcl logs tiny-gpt --tail 3
