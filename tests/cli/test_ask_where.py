"""``lg ask`` says where it runs (one line on stderr) and runs on the workers with ``--workers``:
the real ``lg`` process here, with no broker, a broker it cannot reach, or a broker and no store."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
UNREACHABLE = "redis://:s3cret@127.0.0.1:1/0"  # nothing listens on port 1


def lg_ask(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("LG_", "COLUMNS", "FORCE_COLOR"))}
    clean["PYTHONPATH"] = os.pathsep.join(p for p in (str(HERE), os.environ.get("PYTHONPATH", "")) if p)
    command = [sys.executable, "-m", "lg_core.cli", "ask", "cli_app:EchoAgent", "hi", *args]
    return subprocess.run(command, env={**clean, **env}, capture_output=True, text=True, timeout=120)


@pytest.fixture
def store(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'runs.db'}"


def one_error_line(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 2, (result.returncode, result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert "Traceback" not in result.stderr
    return lines[0]


def test_without_a_broker_ask_says_it_runs_in_this_process(store):
    result = lg_ask("--store", store)

    assert result.returncode == 0, result.stderr
    assert result.stderr.splitlines()[0] == "running in this process (no broker configured)"
    assert result.stdout == "Hello from the echo agent.\n"


def test_with_a_broker_ask_still_runs_here_and_names_the_workers_it_could_use(store):
    result = lg_ask("--store", store, LG_BROKER_URL=UNREACHABLE)

    assert result.returncode == 0, result.stderr
    first = result.stderr.splitlines()[0]
    assert first == "running in this process (--workers runs it on the workers at redis://:***@127.0.0.1:1/0)"
    assert "s3cret" not in result.stderr


def test_workers_without_a_broker_is_one_error_line(store):
    line = one_error_line(lg_ask("--store", store, "--workers"))
    assert "--workers needs the workers' broker: set LG_BROKER_URL" in line


def test_workers_with_an_unreachable_broker_is_one_error_line_and_starts_no_run(store, tmp_path):
    line = one_error_line(lg_ask("--store", store, "--workers", LG_BROKER_URL=UNREACHABLE))
    assert "cannot reach the broker at redis://:***@127.0.0.1:1/0" in line and "s3cret" not in line
    listed = subprocess.run(
        [sys.executable, "-m", "lg_core.cli", "runs", "list", "--store", store], capture_output=True, text=True
    )
    assert "no runs in" in listed.stderr, (listed.stdout, listed.stderr)


def test_workers_with_an_in_memory_store_is_one_error_line():
    line = one_error_line(lg_ask("--workers", LG_BROKER_URL=UNREACHABLE))
    assert "--workers needs the run store the workers use" in line
