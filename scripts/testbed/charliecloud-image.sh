#!/usr/bin/env bash
# Makes a Charliecloud image directory (for `ch-run DEST -- CMD`) from a local docker image:
# `docker create` + `docker export | tar -x`. No registry, no builder.
#   bash scripts/testbed/charliecloud-image.sh IMAGE DEST     # prints DEST
# Idempotent: DEST/ch/docker-image-id records the image id it was made from; when that matches
# the image's current id, nothing is done. Otherwise DEST is rebuilt next to itself and swapped
# in. The image's ENV goes to DEST/ch/environment (`ch-run --set-env` reads it).
set -euo pipefail
IMAGE=${1:?usage: charliecloud-image.sh IMAGE DEST}
DEST=${2:?usage: charliecloud-image.sh IMAGE DEST}
DOCKER=/usr/bin/docker
DEST=$(realpath -m "$DEST")
id=$($DOCKER image inspect -f '{{.Id}}' "$IMAGE")
if [ "$(cat "$DEST/ch/docker-image-id" 2>/dev/null)" = "$id" ]; then echo "$DEST"; exit 0; fi

tmp=$DEST.tmp.$$
old=$DEST.old.$$
cid=
cleanup() {
  [ -n "$cid" ] && $DOCKER rm -f "$cid" >/dev/null 2>&1
  rm -rf "$tmp" "$old"
}
trap cleanup EXIT
mkdir -p "$tmp"
cid=$($DOCKER create "$IMAGE" /bin/true)
$DOCKER export "$cid" | tar -x -C "$tmp"
# ch-run bind-mounts these over the image; they must exist (docker export has them, a bare root may not)
mkdir -p "$tmp"/{dev,proc,sys,tmp,home,mnt,ch,etc}
touch "$tmp/etc/hosts" "$tmp/etc/resolv.conf" "$tmp/etc/passwd" "$tmp/etc/group"
$DOCKER image inspect -f '{{range .Config.Env}}{{println .}}{{end}}' "$IMAGE" | sed '/^$/d' >"$tmp/ch/environment"
echo "$id" >"$tmp/ch/docker-image-id"
if [ -e "$DEST" ]; then mv "$DEST" "$old"; fi
mv "$tmp" "$DEST"
echo "$DEST"
