"""``lg batch submit`` reads an input line up to a limit: a longer one is that line's error, and costs no memory.

Every case runs the real ``lg`` command in a child process. The memory case
feeds it, through a pipe, a line of hundreds of MiB with no newline (what
``/dev/zero`` gives) and reads the child's peak resident size (``VmHWM`` of
``/proc/self/status``) as it exits.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.batch.conftest import read_results

AGENT = "tests.batch.batch_app:ItemAgent"
ROOT = Path(__file__).resolve().parents[2]
MiB = 1 << 20
ESCAPE = "\x1b[2J\x1b[31m"  # clears a terminal and turns it red, if it were echoed


def submit(*args: str, stdin: int | None = None, peak_file: Path | None = None) -> subprocess.CompletedProcess[str]:
    """``lg batch submit AGENT ARGS``; with ``peak_file``, the child writes its peak RSS in KiB there as it exits."""
    code = "from lg_core.cli import main; main()"
    if peak_file is not None:
        code = (
            "import atexit, re\n"
            "def peak():\n"
            "    status = open('/proc/self/status').read()\n"
            f"    open({str(peak_file)!r}, 'w').write(re.search(r'VmHWM:\\s+(\\d+) kB', status).group(1))\n"
            "atexit.register(peak)\n" + code
        )
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200"}
    return subprocess.run(
        [sys.executable, "-c", code, "batch", "submit", AGENT, *args],
        stdin=stdin,
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_an_over_long_line_is_its_own_error_and_the_next_line_runs(tmp_path):
    path = tmp_path / "inputs.jsonl"
    huge = ESCAPE + "x" * (3 * MiB)
    path.write_text(f'"before"\n"{huge}"\n"after"\n')
    out, store = tmp_path / "results.jsonl", f"sqlite:///{tmp_path / 'runs.db'}"

    result = submit(str(path), "--skip-invalid", "--out", str(out), "--store", store)

    assert result.returncode == 1, result.stderr  # not every item completed
    results = {r["line"]: r for r in read_results(out)}
    assert {line: r["outcome"] for line, r in results.items()} == {1: "completed", 2: "invalid", 3: "completed"}
    message = results[2]["error"]["message"]
    assert message.startswith(f"the line is {len(huge) + 2:,} bytes long, over the limit of 1,048,576 ")
    assert "--max-line-bytes" in message
    quoted = message.split("it starts with ", 1)[1]
    assert len(quoted) <= 80 and quoted.startswith("'\"\\x1b[2J\\x1b[31mxxx"), quoted
    assert "\x1b" not in out.read_text(encoding="utf-8") + json.dumps(results) + result.stderr
    assert "x" * 100 not in out.read_text() + result.stderr


def test_without_skip_invalid_the_over_long_line_is_reported_escaped_and_nothing_runs(tmp_path):
    path = tmp_path / "inputs.jsonl"
    path.write_text('"fine"\n"' + ESCAPE + "y" * (2 * MiB) + '"\n')

    result = submit(str(path), "--store", f"sqlite:///{tmp_path / 'runs.db'}")

    assert result.returncode == 2
    assert "line 2: the line is 2,097,163 bytes long" in result.stderr
    assert "\x1b" not in result.stderr and "y" * 100 not in result.stderr
    assert len(result.stderr) < 2000, result.stderr


def test_the_limit_is_an_option(tmp_path):
    path = tmp_path / "inputs.jsonl"
    path.write_text('"a short line"\n"' + "z" * 3000 + '"\n')
    store = f"sqlite:///{tmp_path / 'runs.db'}"

    limited = submit(
        str(path), "--max-line-bytes", "2KiB", "--skip-invalid", "--out", str(tmp_path / "a.jsonl"), "--store", store
    )
    raised = submit(
        str(path),
        "--max-line-bytes",
        "4096",
        "--out",
        str(tmp_path / "b.jsonl"),
        "--store",
        store,
        "--batch-id",
        "raised",
    )
    bad = submit(str(path), "--max-line-bytes", "lots", "--store", store)

    assert sorted((r["line"], r["outcome"]) for r in read_results(tmp_path / "a.jsonl")) == [
        (1, "completed"),
        (2, "invalid"),
    ], limited.stderr
    assert sorted((r["line"], r["outcome"]) for r in read_results(tmp_path / "b.jsonl")) == [
        (1, "completed"),
        (2, "completed"),
    ], raised.stderr
    assert bad.returncode == 2 and "--max-line-bytes" in bad.stderr and "Traceback" not in bad.stderr


@pytest.mark.slow
def test_a_pipe_without_newlines_costs_bounded_memory(tmp_path):
    """512 MiB without a newline, then a valid line: read past at disk speed, never held."""
    size = 512 * MiB
    generator = (
        "import sys\n"
        "block = b'0' * (1 << 20)\n"
        f"for _ in range({size // MiB}):\n"
        "    sys.stdout.buffer.write(block)\n"
        "sys.stdout.buffer.write(b'\\n\"after the zeros\"\\n')\n"
    )
    feeder = subprocess.Popen([sys.executable, "-c", generator], stdout=subprocess.PIPE)
    out, peak = tmp_path / "results.jsonl", tmp_path / "peak"
    started = time.monotonic()
    try:
        result = submit(
            "/dev/stdin",
            "--skip-invalid",
            "--out",
            str(out),
            "--store",
            f"sqlite:///{tmp_path / 'runs.db'}",
            stdin=feeder.stdout.fileno(),
            peak_file=peak,
        )
    finally:
        feeder.stdout.close()
        feeder.wait(timeout=60)
    elapsed = time.monotonic() - started

    assert [(r["line"], r["outcome"]) for r in read_results(out)] == [(1, "invalid"), (2, "completed")], result.stderr
    peak_mib = int(peak.read_text()) / 1024
    print(f"\n{size // MiB} MiB line without a newline: {elapsed:.1f} s, peak RSS {peak_mib:.0f} MiB")
    assert peak_mib < 200, peak_mib  # the whole interpreter, imports and store included; the line alone is 512


def test_a_line_nested_too_deeply_for_the_json_decoder_is_its_own_error(tmp_path):
    path = tmp_path / "inputs.jsonl"
    path.write_text("[" * 200_000 + "]" * 200_000 + '\n"after"\n')
    out = tmp_path / "results.jsonl"

    result = submit(str(path), "--skip-invalid", "--out", str(out), "--store", f"sqlite:///{tmp_path / 'runs.db'}")

    assert "Traceback" not in result.stderr, result.stderr[-2000:]
    results = {r["line"]: r for r in read_results(out)}
    assert results[1]["outcome"] == "invalid" and results[2]["outcome"] == "completed"
    assert results[1]["error"]["message"].startswith("nested too deeply to decode: '[[[[")
    assert len(results[1]["error"]["message"]) < 120


@pytest.mark.parametrize("option", ["inputs", "--out"])
def test_a_path_longer_than_the_file_system_allows_is_one_line(tmp_path, option):
    fine, long = tmp_path / "inputs.jsonl", str(tmp_path / ("q" * 300))
    fine.write_text('"hello"\n')
    args = [long, "--out", str(tmp_path / "r.jsonl")] if option == "inputs" else [str(fine), "--out", long]

    result = submit(*args, "--store", f"sqlite:///{tmp_path / 'runs.db'}")

    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and lines[0].endswith("File name too long"), result.stderr
    assert "characters)" in lines[0]  # the path is cut in the middle


def test_a_long_invalid_value_is_quoted_as_a_short_escaped_excerpt(tmp_path):
    path = tmp_path / "inputs.jsonl"
    long_values = [
        {"message": "hi", "actor_id": ESCAPE + "a b" * 50_000},
        {"message": "hi", "deadline_at": "x" * 200_000},
    ]
    path.write_text("".join(json.dumps(value) + "\n" for value in long_values))
    out = tmp_path / "results.jsonl"

    result = submit(str(path), "--skip-invalid", "--out", str(out), "--store", f"sqlite:///{tmp_path / 'runs.db'}")

    assert result.returncode == 1, result.stderr
    messages = {r["line"]: r["error"]["message"] for r in read_results(out)}
    assert messages[1].startswith("actor_id must be ") and messages[2].startswith("deadline_at 'xxx")
    for message in messages.values():
        quoted = message[message.index("'") :].split("'...")[0] + "'..."
        assert len(quoted) <= 80 and "\x1b" not in message and len(message) <= 400, message
