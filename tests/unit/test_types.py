"""The packages pass mypy (pyproject's [tool.mypy]), so a wrong type hint fails the suite, not a later reader.

The hints on public APIs are part of the documentation; an unchecked hint drifts
from the code until it misleads. The tests and benchmarks are not checked: they
poke at internals on purpose.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("lg_core", "lg_workers", "lg_scheduler")


def test_mypy_finds_nothing():
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--no-error-summary", *PACKAGES],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    # (a missing mypy shows here too: it is a dev dependency, pip install -e '.[dev]')
    assert result.returncode == 0, result.stdout + result.stderr
