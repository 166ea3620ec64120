#!/usr/bin/env bash
# Builds the local Python base image (no registry here): a debootstrapped Debian root, imported.
#   IMAGE   tag to produce            (default tcl-pybase:bookworm)
#   ROOT    where the root is built   (default /var/cache/tcl/deb-root; kept between runs)
#   EXTRA_CA_DIR  extra CA certificates (*.crt) baked into the image, for networks behind a
#                 TLS-intercepting proxy (default /usr/local/share/ca-certificates)
set -euo pipefail
IMAGE=${IMAGE:-tcl-pybase:bookworm}
ROOT=${ROOT:-/var/cache/tcl/deb-root}
EXTRA_CA_DIR=${EXTRA_CA_DIR:-/usr/local/share/ca-certificates}
DOCKER=/usr/bin/docker
if $DOCKER image inspect "$IMAGE" >/dev/null 2>&1; then echo "$IMAGE present"; exit 0; fi
if [ ! -x "$ROOT/usr/bin/python3" ]; then
  rm -rf "$ROOT.tmp"; mkdir -p "$(dirname "$ROOT")"
  debootstrap --variant=minbase \
    --include=python3,python3-venv,ca-certificates,openssh-server,procps,iproute2 \
    bookworm "$ROOT.tmp" >/tmp/tcl-debootstrap.log 2>&1 || { tail -20 /tmp/tcl-debootstrap.log; exit 1; }
  mv "$ROOT.tmp" "$ROOT"
fi
if compgen -G "$EXTRA_CA_DIR/*.crt" >/dev/null; then
  cp "$EXTRA_CA_DIR"/*.crt "$ROOT/usr/local/share/ca-certificates/"
fi
chroot "$ROOT" update-ca-certificates >/dev/null 2>&1 || true
chroot "$ROOT" apt-get clean; rm -rf "$ROOT"/var/lib/apt/lists/*
# python3 -> python, so images built FROM this behave like python:3.11-slim.
ln -sf python3 "$ROOT/usr/bin/python"
tar -C "$ROOT" -c . | $DOCKER import \
    -c 'ENV LANG=C.UTF-8 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1' \
    -c 'CMD ["python3"]' - "$IMAGE" >/dev/null
echo "$IMAGE built"
