#!/usr/bin/env bash
# Builds local stand-ins for the three public images docker/compose.yaml names
# (python:3.11-slim, redis:7-alpine, postgres:16-alpine), for machines that
# reach Debian's package mirror but not Docker Hub, like our CI machines.
# Where Docker Hub is reachable, do not use this: pull the real images.
#
#   sudo ops/docker-standins.sh        # then: ops/docker-smoke.sh
#
# The Python base is Debian bookworm (Python 3.11) made by debootstrap, with a
# virtualenv first on PATH as the official image's /usr/local Python is, and the
# host's CA bundle (so pip works behind a TLS-inspecting proxy the host trusts).
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "docker-standins.sh: run as root (debootstrap needs it)" >&2; exit 2; }
command -v debootstrap >/dev/null || apt-get install -y -q debootstrap >/dev/null
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
ROOTFS=$(mktemp -d)
trap 'rm -rf "$ROOTFS"' EXIT

echo "docker-standins: debootstrap bookworm from $MIRROR"
debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates bookworm "$ROOTFS" "$MIRROR" >/dev/null
printf 'deb %s bookworm main\ndeb %s bookworm-updates main\n' "$MIRROR" "$MIRROR" > "$ROOTFS/etc/apt/sources.list"
cp /etc/ssl/certs/ca-certificates.crt "$ROOTFS/etc/ssl/certs/ca-certificates.crt"
chroot "$ROOTFS" python3 -m venv /usr/local/python
tar -C "$ROOTFS" -c . | docker import \
    -c 'ENV PATH=/usr/local/python/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    -c 'ENV PIP_CERT=/etc/ssl/certs/ca-certificates.crt' \
    -c 'CMD ["python3"]' - python:3.11-slim >/dev/null
echo "docker-standins: python:3.11-slim (stand-in) imported"
docker build -q -t redis:7-alpine ops/docker-standins/redis >/dev/null
echo "docker-standins: redis:7-alpine (stand-in) built"
docker build -q -t postgres:16-alpine ops/docker-standins/postgres >/dev/null
echo "docker-standins: postgres:16-alpine (stand-in) built"
