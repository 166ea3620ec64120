#!/usr/bin/env bash
# Sets up a fresh machine for tcl development: system packages, uv, the locked virtualenv.
set -euo pipefail
cd "$(dirname "$0")/.."
export UV_PYTHON_DOWNLOADS=never
# uv must trust the same CAs as the host (TLS-intercepting proxies).
export SSL_CERT_FILE=${SSL_CERT_FILE:-/etc/ssl/certs/ca-certificates.crt}
bash scripts/testbed/install.sh
uv sync --locked --all-extras --python "$(command -v python3)"
