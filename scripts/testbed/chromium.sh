#!/usr/bin/env bash
# Installs Debian's chromium for the browser tests and benchmarks (idempotent; quick when it is
# there already). Playwright cannot download its own browsers here, so the tests launch this one.
# Prints the executable's path on its last line.
set -euo pipefail
CHROMIUM=/usr/bin/chromium
if [ ! -x "$CHROMIUM" ]; then
  export DEBIAN_FRONTEND=noninteractive
  # apt's lists may be missing on a fresh machine; fetch them only then
  if ! apt-cache show chromium >/dev/null 2>&1; then apt-get update -qq; fi
  # fonts-liberation: readable text in screenshots (a recommend, skipped by --no-install-recommends)
  apt-get install -y -qq --no-install-recommends chromium fonts-liberation >/dev/null
fi
"$CHROMIUM" --version >&2
echo "$CHROMIUM"
