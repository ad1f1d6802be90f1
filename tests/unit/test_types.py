"""The whole tree passes mypy (pyproject's [tool.mypy]), so a wrong type hint fails the suite, not a later reader.

The hints on public APIs are part of the documentation; an unchecked hint drifts
from the code until it misleads. The tests, benchmarks, examples and ops scripts
are checked too: their helpers' hints are what a reader of a failing test trusts.
As mypy does by default, the body of a function without annotations (most test
functions) is not checked.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TREES = ("lg_core", "lg_workers", "lg_scheduler", "bench", "examples", "ops", "tests")


def test_mypy_finds_nothing():
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--no-error-summary", *TREES],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    # (a missing mypy shows here too: it is a dev dependency, pip install -e '.[dev]')
    assert result.returncode == 0, result.stdout + result.stderr
