"""Batches on threads of this process (no broker) against a SQLite file store."""

from __future__ import annotations

import io
import json
import re
from collections import Counter

import pytest
from rich.console import Console

from lg_core import Configuration, Hook, current_runtime, with_configuration
from lg_scheduler.batch import default_batch_id, run_id_for, submit_batch
from lg_scheduler.batch_output import BatchProgress, ScanProgress
from tests.batch.batch_app import ItemAgent, logged_items
from tests.batch.conftest import read_results


def max_overlap(records) -> int:
    """The most runs alive at one instant, from the store's created/finished timestamps."""
    edges = sorted(
        [(r.created_at, 1) for r in records] + [(r.finished_at, -1) for r in records], key=lambda e: (e[0], e[1])
    )
    alive = peak = 0
    for _at, step in edges:
        alive += step
        peak = max(peak, alive)
    return peak


def test_thirty_items_with_concurrency_five_each_complete_once(file_config, inputs, batch_env, tmp_path, monkeypatch):
    monkeypatch.setenv("BATCH_APP_DELAY", "0.05")
    path = inputs([f"item {n}" for n in range(1, 31)])
    out = tmp_path / "results.jsonl"

    report = submit_batch(ItemAgent, path, concurrency=5, out=out, progress=False)

    assert report.ok and (report.total, report.completed, report.started) == (30, 30, 30)
    assert report.outcomes == {"completed": 30}
    results = read_results(out)
    assert sorted(r["line"] for r in results) == list(range(1, 31))
    assert {r["outcome"] for r in results} == {"completed"}
    assert all(r["response"] == f"done: item {r['line']}" and r["usage"]["total_tokens"] > 0 for r in results)
    assert Counter(logged_items(batch_env)) == Counter(f"item {n}" for n in range(1, 31))

    records = [current_runtime().store.load_run(run_id_for(report.batch_id, str(n))) for n in range(1, 31)]
    assert all(r.status == "completed" for r in records)
    assert 1 < max_overlap(records) <= 5


def test_the_batch_id_and_run_ids_are_deterministic(file_config, inputs, tmp_path):
    path = inputs(["one", {"message": "two", "id": "order 481/b"}])

    report = submit_batch(ItemAgent, path, concurrency=2, progress=False)

    digest = __import__("hashlib").sha256(path.read_bytes()).hexdigest()
    assert report.batch_id == default_batch_id(ItemAgent, digest)
    assert report.batch_id.startswith("item-")
    ids = {r["id"]: r["run_id"] for r in report.results}
    assert ids["1"] == f"{report.batch_id}.1"
    assert ids["order 481/b"].startswith(f"{report.batch_id}:") and ids["order 481/b"] == run_id_for(
        report.batch_id, "order 481/b"
    )
    other = inputs(["one", "three"], name="other.jsonl")
    assert submit_batch(ItemAgent, other, concurrency=1, progress=False).batch_id != report.batch_id


def test_invocation_fields_reach_the_run(file_config, inputs):
    line = {
        "message": "with fields",
        "id": "fielded",
        "context": {"account_id": "a-2"},
        "actor_id": "user-7",
        "session_id": "conversation-42",
        "metadata": {"source": "batch"},
        "settings": {"temperature": 0},
        "deadline": 3600,
    }
    report = submit_batch(ItemAgent, inputs([line]), concurrency=1, progress=False)

    record = current_runtime().store.load_run(report.results[0]["run_id"])
    invocation = record.invocation
    assert record.status == "completed"
    assert invocation["context"] == {"account_id": "a-2"}
    assert (record.actor_id, record.session_id) == ("user-7", "conversation-42")
    assert invocation["metadata"] == {"source": "batch"} and invocation["settings"] == {"temperature": 0}
    assert record.deadline_at is not None and record.deadline_at > record.created_at + 3500


def test_failed_runs_are_reported_with_their_error(file_config, inputs, tmp_path):
    out = tmp_path / "results.jsonl"
    report = submit_batch(
        ItemAgent, inputs(["fine", "please explode", "also fine"]), concurrency=3, out=out, progress=False
    )

    assert not report.ok
    assert (report.completed, report.failed) == (2, 1)
    failed = next(r for r in read_results(out) if r["outcome"] != "completed")
    assert failed["line"] == 2 and failed["outcome"] == "failed"
    assert failed["error"]["class"] == "ProviderError" and "exploded" in failed["error"]["message"]


def test_submitting_a_finished_batch_again_runs_nothing(file_config, inputs, batch_env, tmp_path):
    path = inputs([f"item {n}" for n in range(1, 9)])
    out = tmp_path / "results.jsonl"
    first = submit_batch(ItemAgent, path, concurrency=4, out=out, progress=False)
    calls = logged_items(batch_env)

    again = submit_batch(ItemAgent, path, concurrency=4, out=out, progress=False)

    assert again.batch_id == first.batch_id
    assert (again.already_finished, again.started, again.completed) == (8, 0, 8)
    assert logged_items(batch_env) == calls
    assert sorted(r["line"] for r in read_results(out)) == list(range(1, 9))


def test_the_batch_record_tracks_counts(file_config, inputs):
    report = submit_batch(ItemAgent, inputs(["a", "b", "explode"]), concurrency=2, progress=False)

    record = current_runtime().store.load_batch(report.batch_id)
    assert (record.status, record.total, record.completed, record.failed, record.invalid, record.running) == (
        "finished",
        3,
        2,
        1,
        0,
        0,
    )
    assert record.agent == "tests.batch.batch_app:ItemAgent"
    assert record.holder is None and record.finished_at is not None
    assert current_runtime().store.list_batches()[0].id == report.batch_id


def test_the_progress_bar_shows_counts_on_a_terminal():
    buffer = io.StringIO()
    console = Console(file=buffer, force_terminal=True, width=160)
    progress = BatchProgress(True, "b-1", 10, console=console)
    progress.update({"completed": 6, "failed": 1, "invalid": 2, "running": 1})
    progress.close()
    text = buffer.getvalue()
    assert "batch b-1" in text and "9/10" in text
    assert "6 completed" in text and "1 failed" in text and "2 invalid" in text and "1 in flight" in text


def _final_frame(text: str) -> str:
    """What the terminal shows once the bar stopped: the last frame rich drew, without control codes."""
    frame = text.split("\r")[-1]
    return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", frame)


@pytest.mark.parametrize("width", [80, 50, 24])
def test_the_progress_bar_is_readable_on_a_narrow_terminal(width):
    buffer = io.StringIO()
    console = Console(file=buffer, force_terminal=True, width=width, color_system=None)
    progress = BatchProgress(True, "support-agent-1a2b3c4d5e6f", 500_000, console=console)
    progress.update({"completed": 6000, "failed": 100, "invalid": 2, "running": 16})
    progress.close()
    frame = _final_frame(buffer.getvalue())
    assert "…" not in frame, frame
    assert all(len(line) <= width for line in frame.splitlines()), frame
    words = " ".join(frame.split())
    assert "6102/500000" in words
    assert "6000 completed, 100 failed, 2 invalid, 16 in flight" in words
    assert "support-agent-1a2b3c4d5e" in frame


def test_the_progress_bar_fits_the_columns_the_environment_gives(monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    buffer = io.StringIO()
    progress = BatchProgress(True, "b-1", 10, console=Console(file=buffer, force_terminal=True, color_system=None))
    progress.update({"completed": 6, "failed": 1, "invalid": 2, "running": 1})
    progress.close()
    frame = _final_frame(buffer.getvalue())
    assert "…" not in frame and "9/10" in frame and "0:00:00" in frame, frame  # the times fit too
    assert max(len(line) for line in frame.splitlines()) <= 80


def test_no_progress_bar_without_a_terminal():
    buffer = io.StringIO()
    progress = BatchProgress(True, "b-1", 10, console=Console(file=buffer, force_terminal=False))
    progress.update({"completed": 6, "failed": 1, "invalid": 2, "running": 1})
    progress.close()
    assert buffer.getvalue() == ""


class RefuseSome(Hook):
    """Starting a run fails for messages that say so (as a broken hook or store would)."""

    def prepare_execution(self, run):
        if "refuse" in run.invocation.message.text:
            raise RuntimeError("cannot start this one")
        return run


def test_an_item_that_cannot_start_is_reported_and_retried_by_the_next_submit(tmp_path, inputs):
    path = inputs(["fine", "refuse me"])
    out = tmp_path / "results.jsonl"
    refusing = Configuration(run_store=f"sqlite:///{tmp_path / 'runs.db'}", hooks=[RefuseSome])
    with with_configuration(refusing):
        first = submit_batch(ItemAgent, path, concurrency=2, out=out, progress=False)
    refusing.close()
    assert (first.completed, first.failed, first.outcomes) == (1, 1, {"completed": 1, "not_started": 1})
    refused = next(r for r in read_results(out) if r["line"] == 2)
    assert refused["outcome"] == "not_started" and refused["error"] == {
        "class": "RuntimeError",
        "message": "cannot start this one",
    }

    plain = Configuration(run_store=f"sqlite:///{tmp_path / 'runs.db'}")
    with with_configuration(plain):
        second = submit_batch(ItemAgent, path, concurrency=2, out=out, progress=False)
    plain.close()
    assert second.ok and (second.already_finished, second.started) == (1, 1)


def test_late_lines_of_a_submitter_taken_over_do_not_land_in_the_new_results(file_config, inputs, tmp_path):
    """``--force`` takes a batch over from a live submitter, which writes on until its next save notices.

    Its file handle is simulated here: opened before the resubmit, 3 lines written, and one
    more line written once the resubmit has rewritten the file. Truncated in place, the file
    got that line over its 4th (one item twice, one missing); replaced, it is not touched.
    """
    path = inputs([f"item {n}" for n in range(1, 7)])
    out = tmp_path / "results.jsonl"
    submit_batch(ItemAgent, path, concurrency=2, out=out, progress=False)
    lines = sorted(out.read_text().splitlines(), key=lambda line: json.loads(line)["line"])
    old_submitter = out.open("w")
    old_submitter.write("\n".join(lines[:3]) + "\n")
    old_submitter.flush()

    def late_line(report) -> None:
        old_submitter.write(lines[4] + "\n")
        old_submitter.flush()

    try:
        again = submit_batch(ItemAgent, path, concurrency=2, out=out, progress=False, on_start=late_line)
    finally:
        old_submitter.close()

    assert again.already_finished == 6
    assert sorted(r["line"] for r in read_results(out)) == [1, 2, 3, 4, 5, 6]


def test_a_results_file_is_replaced_with_its_permissions_and_devices_are_written_in_place(
    file_config, inputs, tmp_path
):
    path = inputs(["a", "b"])
    out = tmp_path / "results.jsonl"
    out.write_text("stale\n")
    out.chmod(0o640)
    link = tmp_path / "link.jsonl"
    link.symlink_to(out)

    submit_batch(ItemAgent, path, concurrency=2, out=link, progress=False)

    assert link.is_symlink() and sorted(r["id"] for r in read_results(out)) == ["1", "2"]
    assert out.stat().st_mode & 0o777 == 0o640
    submit_batch(ItemAgent, path, concurrency=2, out=out, progress=False)
    assert out.stat().st_mode & 0o777 == 0o640 and len(read_results(out)) == 2
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".results")] == []


def test_checking_a_large_input_file_shows_a_bar_and_a_pipe_one_without_total(tmp_path):
    """Validating 500,000 lines takes about a minute: the user sees bytes and lines checked, not silence."""
    for size, shown in ((50_000, "50%"), (None, "")):
        buffer = io.StringIO()
        checking = ScanProgress(
            True, "checking inputs.jsonl", console=Console(file=buffer, force_terminal=True, width=160)
        )
        checking(size, 25_000, 1000)
        checking(size, 25_000, 2000)
        checking.close()
        text = buffer.getvalue()
        assert "checking inputs.jsonl" in text and "2,000 lines" in text and shown in text


def test_a_resubmit_shows_its_runs_being_looked_up():
    buffer = io.StringIO()
    looking = ScanProgress(
        True,
        "batch b-1: looking up its runs",
        unit="items",
        console=Console(file=buffer, force_terminal=True, width=160),
    )
    looking(4000, 1024, 1024)
    looking.close()
    text = buffer.getvalue()
    assert "batch b-1: looking up its runs" in text and "1,024 items" in text and "26%" in text


def test_no_checking_bar_for_a_small_file_or_without_a_terminal():
    for terminal, lines in ((True, 999), (False, 5000)):
        buffer = io.StringIO()
        checking = ScanProgress(True, "checking inputs.jsonl", console=Console(file=buffer, force_terminal=terminal))
        checking(10_000, 10_000, lines)
        checking.close()
        assert buffer.getvalue() == ""


def test_a_resubmit_saves_the_counts_it_finds_while_it_looks_up_its_runs(file_config, inputs):
    """A submitter killed between saves left counts behind; ``lg batch status`` catches up before the first start."""
    path = inputs(["a", "b", "explode"])
    first = submit_batch(ItemAgent, path, concurrency=3, progress=False)
    store = current_runtime().store
    with store.db.transaction() as tx:  # as a submitter SIGKILLed after its last save would leave them
        tx.cursor.execute("UPDATE lg_batches SET completed = 0, failed = 0, status = 'running'")
    seen = []

    submit_batch(
        ItemAgent,
        path,
        concurrency=3,
        progress=False,
        on_start=lambda report: seen.append(store.load_batch(first.batch_id)),
    )

    assert (seen[0].completed, seen[0].failed) == (2, 1)
