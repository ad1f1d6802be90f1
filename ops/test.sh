#!/usr/bin/env bash
# Sets up everything and runs the whole test suite: system programs (Redis,
# PostgreSQL, Bubblewrap), a virtualenv with the project and its test
# dependencies, then pytest. Extra arguments go to pytest, e.g.
#   ops/test.sh -m "not slow"      # the fast tier: no crash, stack or benchmark tests
#   ops/test.sh -n 0               # one process, no pytest-xdist workers
#
# The suite runs on LG_TEST_WORKERS (default 2) pytest-xdist processes; each test
# file runs whole on one worker (--dist loadfile, so a module's servers start once).
# Most of a serial run's time is spent waiting on the servers and worker
# processes the tests start, so two workers on two cores take about half as long.
set -euo pipefail
cd "$(dirname "$0")/.."

ops/system-deps.sh
python3 -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip >/dev/null
.venv/bin/python -m pip install -q -e '.[dev,postgres]'
exec .venv/bin/python -m pytest --numprocesses "${LG_TEST_WORKERS:-2}" --dist loadfile "$@"
