#!/usr/bin/env bash
# Sets up everything and runs the whole test suite: system programs (Redis,
# PostgreSQL, Bubblewrap), a virtualenv with the project and its test
# dependencies, then pytest. Extra arguments go to pytest, e.g.
#   ops/test.sh -m "not chaos"     # skip the slow crash tests
set -euo pipefail
cd "$(dirname "$0")/.."

ops/system-deps.sh
python3 -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip >/dev/null
.venv/bin/python -m pip install -q -e '.[dev,postgres]'
exec .venv/bin/python -m pytest "$@"
