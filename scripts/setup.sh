#!/usr/bin/env bash
# Sets up a fresh machine for tcl development: system packages, uv, the locked virtualenv.
set -euo pipefail
cd "$(dirname "$0")/.."
export UV_PYTHON_DOWNLOADS=never
# uv must trust the same CAs as the host (TLS-intercepting proxies).
export SSL_CERT_FILE=${SSL_CERT_FILE:-/etc/ssl/certs/ca-certificates.crt}
bash scripts/testbed/install.sh
command -v uv >/dev/null || PATH="$(dirname "$(bash scripts/uv.sh)"):$PATH"  # scripts/uv.sh put it
# Compile bytecode at install time: with PYTHONDONTWRITEBYTECODE=1 (set on some machines) Python
# never caches it, and every `tcl` command would recompile SQLAlchemy, pydantic, asyncssh…
# from source (~1 s per command). The project's own modules are compiled too (stale ones are
# simply recompiled in memory after an edit).
export UV_COMPILE_BYTECODE=1
uv sync --locked --all-extras --python "$(command -v python3)"
.venv/bin/python -m compileall -q tcl >/dev/null
