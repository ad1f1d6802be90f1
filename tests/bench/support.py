"""Running a benchmark script the way its smoke tests need it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parents[2] / "bench"


def bench_env() -> dict[str, str]:
    """This environment with the tree under test first on PYTHONPATH.

    A script's first path entry is its own folder, so without this it imports
    the installed lg_core (another clone's, with an editable install).
    """
    tree = str(BENCH_DIR.parent)
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (tree, os.environ.get("PYTHONPATH", "")) if p)}


def run_quick(script: str, workdir: Path, *args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    """``bench/<script> --quick --dir workdir *args``, which must exit 0."""
    result = subprocess.run(
        [sys.executable, str(BENCH_DIR / script), "--quick", "--dir", str(workdir), *args],
        capture_output=True,
        text=True,
        env=bench_env(),
        timeout=timeout,
    )
    assert result.returncode == 0, f"stdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    return result
