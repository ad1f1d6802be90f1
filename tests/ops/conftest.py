"""Fixtures for the operations tests (helpers are in tests/ops/support.py)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from lg_scheduler.stack.stack import listening_port
from tests.ops.support import Stack


@pytest.fixture
def stack() -> Iterator[Stack]:
    """A stack directory the 'postgres' user can reach (pytest's tmp dirs are private to root); always brought down."""
    root = Path(tempfile.mkdtemp(prefix="lg-stack-test-"))
    root.chmod(0o755)
    handle = Stack(root / "stack", {name: listening_port() for name in ("redis", "postgres", "flower")})
    yield handle
    handle.run("down")
    shutil.rmtree(root, ignore_errors=True)
