#!/usr/bin/env bash
# Checks the README's first command as a new user meets it: scripts/demo.sh in a fresh Debian
# container (tcl-pybase:bookworm: python3, no uv, no pip, no git, no docker) with this working
# tree copied in; prints the time to the first job line and the whole run, and fails if the demo
# fails or installed any of the test lab's system packages.
#   bash scripts/demo-check.sh        (needs dockerd: scripts/testbed/dockerd-up.sh, base-image.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
src=$(mktemp -d /tmp/tcl-demo-src.XXXXXX)
trap 'rm -rf "$src"' EXIT
git ls-files -co --exclude-standard | tar -cf - -T - | tar -C "$src" -xf -
docker run --rm -v "$src:/src:ro" tcl-pybase:bookworm bash -c '
  set -e; cp -r /src /repo; cd /repo; SECONDS=0
  bash scripts/demo.sh 2>&1 | while IFS= read -r line; do printf "%4ss %s\n" "$SECONDS" "$line"; done
  test "${PIPESTATUS[0]}" = 0
  lab=$(dpkg -l | awk "/^ii/ {print \$2}" | grep -E "^(docker|postgresql|slurm|munge|redis|charliecloud|debootstrap)" || true)
  if [ -n "$lab" ]; then echo "the demo installed lab packages: $lab"; exit 1; fi
  echo "no lab package installed"'
