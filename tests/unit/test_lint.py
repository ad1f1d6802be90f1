"""The tree passes ruff (pyproject's [tool.ruff] rules), so lint debt fails the suite, not a later reader."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_ruff_finds_nothing():
    ruff = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
    assert ruff, "ruff is a dev dependency: pip install -e '.[dev]'"
    result = subprocess.run([ruff, "check", "--output-format", "concise", "."], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
