"""Fixtures for the batch tests: a tool log per test and an input-file writer."""

from __future__ import annotations

import json
from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def batch_env(tmp_path, monkeypatch):
    """No store, broker or imports from the environment; a fresh tool log; instant models."""
    for name in ("LG_RUN_STORE", "LG_IMPORTS", "LG_BROKER_URL", "COLUMNS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("BATCH_APP_LOG", str(tmp_path / "calls.log"))
    monkeypatch.setenv("BATCH_APP_DELAY", "0")
    return tmp_path / "calls.log"


@pytest.fixture
def inputs(tmp_path):
    """``inputs(lines, name=...)`` writes a JSONL file: dicts/strings are JSON-encoded, other text is written raw."""

    def write(lines, name: str = "inputs.jsonl") -> Path:
        path = tmp_path / name
        rendered = [line if isinstance(line, RawLine) else json.dumps(line) for line in lines]
        path.write_text("\n".join(rendered) + "\n")
        return path

    return write


class RawLine(str):
    """A line written to the input file as is (for invalid JSON and blank lines)."""


def read_results(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
