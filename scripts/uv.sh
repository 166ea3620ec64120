#!/usr/bin/env bash
# Prints the path of a uv executable, installing one for this user when none is found, without
# root and without touching the system Python (Debian's is "externally managed"):
#   1. uv on PATH, or in ~/.local/bin, or the one this script installed before ($TCL_UV_HOME/bin);
#   2. else a private venv (python3 -m venv) in $TCL_UV_HOME with `pip install uv` in it;
#   3. else (no venv module, as on a stock Debian without python3-venv) uv's wheel from PyPI,
#      unpacked by the standard library (scripts/uv_wheel.py): the binary it ships.
# Progress goes to stderr; stdout is the path alone.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
home="${TCL_UV_HOME:-${XDG_DATA_HOME:-$HOME/.local/share}/tcl/uv}"
for cand in "$(command -v uv || true)" "$HOME/.local/bin/uv" "$home/bin/uv"; do
  if [ -n "$cand" ] && [ -x "$cand" ]; then echo "$cand"; exit 0; fi
done
mkdir -p "$home"
echo "[setup] uv not found: installing it for this user in $home" >&2
if python3 -m venv "$home/venv" >/dev/null 2>&1 && [ -x "$home/venv/bin/pip" ]; then
  "$home/venv/bin/pip" install -q --disable-pip-version-check uv >&2
  # linked alone into bin/: putting the venv's bin on PATH would also shadow python3
  mkdir -p "$home/bin" && ln -sf "$home/venv/bin/uv" "$home/bin/uv"
  echo "$home/bin/uv"
  exit 0
fi
rm -rf "$home/venv"
python3 "$here/uv_wheel.py" "$home/bin" >&2
echo "$home/bin/uv"
