#!/usr/bin/env bash
# Installs the system programs the test suite starts by itself: redis-server,
# PostgreSQL, Bubblewrap and Chromium (headless, for the Flower screenshot test,
# driven by the Python playwright package: never `playwright install`)
# (Debian/Ubuntu). Safe to re-run; does nothing when they are already present.
set -euo pipefail

need=()
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
command -v bwrap >/dev/null 2>&1 || need+=(bubblewrap)
command -v chromium >/dev/null 2>&1 || need+=(chromium)
if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 && ! command -v initdb >/dev/null 2>&1; then
  need+=(postgresql)
fi
[ ${#need[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -eq 0 ]; then sudo=""; elif command -v sudo >/dev/null 2>&1; then sudo="sudo"; else
  echo "missing system packages: ${need[*]} (install them, or run as root)" >&2
  exit 1
fi
echo "installing system packages: ${need[*]}"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
