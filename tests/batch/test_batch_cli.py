"""``lg batch submit|status|list`` driven in-process with Typer's CliRunner on a SQLite file store."""

from __future__ import annotations

import json
import os
import pty
import re
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from lg_core.cli import app, runs_app
from lg_scheduler.batch_cli import register
from tests.batch.conftest import RawLine, read_results

AGENT = "tests.batch.batch_app:ItemAgent"
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def commands():
    """The batch commands on the ``lg`` app (``main()`` adds them from the entry point)."""
    if not any(group.name == "batch" for group in app.registered_groups):
        register(app, runs_app)


@pytest.fixture
def store(tmp_path):
    return f"sqlite:///{tmp_path / 'runs.db'}"


def lg(*args: str):
    return CliRunner().invoke(app, list(args))


def assert_usage_error(result, *fragments: str) -> None:
    assert result.exit_code == 2, (result.exit_code, result.output)
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("error: "), result.stderr
    for fragment in fragments:
        assert fragment in last, (fragment, last)
    assert "Traceback" not in result.output


def test_submit_runs_the_batch_and_reports(store, inputs, tmp_path):
    out = tmp_path / "results.jsonl"
    result = lg(
        "batch",
        "submit",
        AGENT,
        str(inputs(["a", "b", "c"])),
        "--concurrency",
        "2",
        "--out",
        str(out),
        "--store",
        store,
        "--json",
    )

    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert (report["total"], report["completed"], report["started"]) == (3, 3, 3)
    assert f"batch {report['batch_id']}: 3 items, 3 to start" in result.stderr
    assert "3/3 completed" in result.stderr and str(out) in result.stderr
    assert len(read_results(out)) == 3

    again = lg("batch", "submit", AGENT, str(inputs(["a", "b", "c"])), "--store", store)
    assert again.exit_code == 0 and "3 already finished, 0 to start" in again.stderr


def test_status_and_list_show_the_batch(store, inputs):
    submitted = lg("batch", "submit", AGENT, str(inputs(["a", "explode"])), "--store", store, "--batch-id", "nightly")
    assert submitted.exit_code == 1  # an item failed

    status = lg("batch", "status", "nightly", "--store", store)
    assert status.exit_code == 0, status.output
    assert "batch nightly  finished with failures" in status.stdout
    assert "2/2 done: 1 completed, 1 failed, 0 invalid; 0 in flight, 0 not started" in status.stdout
    assert AGENT in status.stdout

    data = json.loads(lg("batch", "status", "nightly", "--store", store, "--json").stdout)
    assert (data["id"], data["status"], data["completed"], data["failed"], data["submitter_alive"]) == (
        "nightly",
        "finished",
        1,
        1,
        False,
    )

    listing = lg("batch", "list", "--store", store)
    assert listing.exit_code == 0 and "nightly" in listing.stdout and "2/2" in listing.stdout


def test_invalid_lines_are_listed_then_one_error_line(store, inputs):
    result = lg("batch", "submit", AGENT, str(inputs(["ok", RawLine("{nope"), {"id": 3}])), "--store", store)

    assert_usage_error(result, "has 2 invalid lines; nothing was submitted", "--skip-invalid")
    assert "line 2: not valid JSON" in result.stderr and 'line 3: missing "message"' in result.stderr
    assert lg("batch", "list", "--store", store).stderr.strip() == "no batches in this run store"


def test_skip_invalid_exits_1_and_reports_them(store, inputs, tmp_path):
    out = tmp_path / "results.jsonl"
    result = lg(
        "batch",
        "submit",
        AGENT,
        str(inputs(["ok", RawLine("{nope")])),
        "--store",
        store,
        "--skip-invalid",
        "--out",
        str(out),
    )
    assert result.exit_code == 1
    assert "1 completed, 1 invalid" in result.stderr
    assert [r["outcome"] for r in sorted(read_results(out), key=lambda r: r["line"])] == ["completed", "invalid"]


def test_resubmitting_without_skip_invalid_says_to_pass_it_again(store, inputs):
    path = str(inputs(["ok", RawLine("{nope")]))
    assert lg("batch", "submit", AGENT, path, "--store", store, "--skip-invalid", "--batch-id", "skips").exit_code == 1

    result = lg("batch", "submit", AGENT, path, "--store", store, "--batch-id", "skips")

    assert_usage_error(
        result,
        "has 1 invalid line, which batch skips skipped when it was submitted with --skip-invalid",
        "pass --skip-invalid again to resume it",
        "a fixed file would be a new batch",
    )


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["tests.batch.batch_app:Missing", "IN"], "has no attribute 'Missing'"),
        (["tests.batch.batch_app:PlainTool", "IN"], "is not an Agent subclass"),
        (["no_such_module:Agent", "IN"], "cannot import module 'no_such_module'"),
        ([AGENT, "missing.jsonl"], "input file missing.jsonl does not exist"),
        ([AGENT, "IN", "--concurrency", "0"], "concurrency must be an integer from 1"),
        ([AGENT, "IN", "--rate-limit", "fast"], "rate limit 'fast' is not understood"),
        ([AGENT, "IN", "--out", "/nonexistent-dir/results.jsonl"], "the directory /nonexistent-dir does not exist"),
        ([AGENT, "IN", "--batch-id", "a.b"], "batch id must be"),
    ],
)
def test_bad_submissions_fail_before_anything_starts(store, inputs, args, fragment):
    path = str(inputs(["x"]))
    result = lg("batch", "submit", *[path if a == "IN" else a for a in args], "--store", store)
    assert_usage_error(result, fragment)
    assert "no batches" in lg("batch", "list", "--store", store).stderr


def test_an_in_memory_store_is_refused(inputs):
    result = lg("batch", "submit", AGENT, str(inputs(["x"])), "--store", "sqlite://")
    assert_usage_error(result, "a batch needs a durable run store")


def test_status_of_an_unknown_batch(store, inputs):
    lg("batch", "submit", AGENT, str(inputs(["x"])), "--store", store)
    assert_usage_error(lg("batch", "status", "nope", "--store", store), "no batch 'nope'", "lg batch list")


def test_the_lg_script_has_the_batch_commands():
    """Installed through the ``littleghost.cli`` entry point, not only registered by these tests."""
    result = subprocess.run([sys.executable, "-m", "lg_core.cli", "batch", "--help"], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert all(command in result.stdout for command in ("submit", "status", "list"))


def test_out_may_not_be_the_input_file_or_the_store(store, inputs, tmp_path):
    """The writer truncates its file: the input and the run store are refused before anything opens."""
    path = inputs(["a", "b"])
    before = path.read_bytes()
    assert_usage_error(
        lg("batch", "submit", AGENT, str(path), "--store", store, "--out", str(path)), "which the batch reads"
    )
    assert path.read_bytes() == before

    lg("batch", "submit", AGENT, str(path), "--store", store)  # the store exists now, with runs
    database = tmp_path / "runs.db"
    size = database.stat().st_size
    for target in (database, tmp_path / "runs.db-wal"):
        assert_usage_error(
            lg("batch", "submit", AGENT, str(path), "--store", store, "--out", str(target)), "which the batch reads"
        )
    assert database.stat().st_size == size
    assert "finished  2/2" in lg("batch", "list", "--store", store).stdout


def test_a_malformed_broker_url_is_a_usage_error(store, inputs):
    result = lg("batch", "submit", AGENT, str(inputs(["x"])), "--store", store, "--broker", "notaurl")
    assert_usage_error(result, "broker_url: 'notaurl' is not a Redis URL")


def test_limits_beyond_the_stores_integers_are_usage_errors(store):
    result = lg("batch", "list", "--store", store, "--limit", str(2**63))
    assert result.exit_code == 2 and "Traceback" not in result.output


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full (a disk that is always full)")
def test_results_that_cannot_be_written_stop_the_batch_with_one_line(store, inputs, tmp_path):
    """A full disk under --out: one red line saying how to go on, and a resubmit finishes the batch."""
    path = inputs(["a", "b", "c"])
    result = lg("batch", "submit", AGENT, str(path), "--store", store, "--out", "/dev/full", "--batch-id", "full")

    assert result.exit_code == 1, result.output
    assert not isinstance(result.exception, OSError), result.exception
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("error: cannot write the results to /dev/full: No space left on device"), result.stderr
    assert "submit the same command again" in last
    assert "Traceback" not in result.output

    out = tmp_path / "results.jsonl"
    again = lg("batch", "submit", AGENT, str(path), "--store", store, "--out", str(out), "--batch-id", "full")
    assert again.exit_code == 0, again.output
    assert sorted(r["id"] for r in read_results(out)) == ["1", "2", "3"]


def on_a_terminal(*args: str) -> list[str]:
    """The lines ``lg`` shows on a terminal (a pseudo-terminal), without colours and cursor moves."""
    leader, follower = pty.openpty()
    env = {k: v for k, v in os.environ.items() if not k.startswith("LG_")}
    env.update(PYTHONPATH=str(ROOT), COLUMNS="160")
    child = subprocess.Popen(
        [sys.executable, "-m", "lg_core.cli", *args], stdin=follower, stdout=follower, stderr=follower, env=env
    )
    os.close(follower)
    shown = b""
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        shown += chunk
    os.close(leader)
    assert child.wait(timeout=60) == 0, shown.decode(errors="replace")
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", shown.decode())
    return [line for line in re.split(r"\r\n|\r|\n", text) if line.strip()]


def test_the_start_line_is_not_written_into_the_progress_bar(store, inputs):
    """On a terminal, "batch ID: N items, ..." is a line of its own above the bar, not glued to its first frame."""
    lines = on_a_terminal("batch", "submit", AGENT, str(inputs(["a", "b"])), "--store", store, "--batch-id", "tty")

    assert "batch tty: 2 items, 2 to start" in lines, lines
    assert any("2/2" in line and "2 completed" in line for line in lines), lines
    assert lines[-1] == "batch tty: 2/2 completed (2 completed)", lines
