"""Two batches given one ``--out``: the second is refused, and the first's results stay whole."""

from __future__ import annotations

import hashlib
import signal
from pathlib import Path

import pytest

from lg_core.errors import InvocationError, RunStateError
from lg_scheduler.batch import default_batch_id, submit_batch
from lg_scheduler.output_lock import OutputLock, output_locked
from tests.batch.batch_app import ItemAgent
from tests.batch.conftest import read_results
from tests.batch.test_batch_resume import start_batch, wait_for_results


def test_a_second_batch_writing_the_same_out_file_is_refused_and_the_first_keeps_its_results(
    file_config, inputs, batch_env, tmp_path
):
    first = inputs([f"item {n}" for n in range(1, 11)], name="first.jsonl")
    second = inputs([f"other {n}" for n in range(1, 4)], name="second.jsonl")
    out = tmp_path / "results.jsonl"
    child = start_batch(file_config.run_store, first, out, batch_env)
    try:
        wait_for_results(out, child, 2)

        first_id = default_batch_id(ItemAgent, hashlib.sha256(first.read_bytes()).hexdigest())
        with pytest.raises(
            InvocationError, match=rf"results\.jsonl is being written by batch {first_id} .*another --out"
        ):
            submit_batch(ItemAgent, second, concurrency=2, out=out, progress=False)
        elsewhere = submit_batch(ItemAgent, second, concurrency=2, out=tmp_path / "other.jsonl", progress=False)

        assert child.wait(timeout=60) == 0, child.stderr.read().decode()
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert elsewhere.ok and elsewhere.completed == 3
    assert sorted(r["line"] for r in read_results(out)) == list(range(1, 11))
    assert not (tmp_path / ".results.jsonl.lock").exists(), "a finished batch leaves no lock file"

    again = submit_batch(ItemAgent, second, concurrency=2, out=out, progress=False)  # the file is free now
    assert again.ok and sorted(r["line"] for r in read_results(out)) == [1, 2, 3]


def test_a_killed_batch_leaves_its_out_file_free(file_config, inputs, batch_env, tmp_path):
    first = inputs([f"item {n}" for n in range(1, 11)], name="first.jsonl")
    second = inputs(["other 1"], name="second.jsonl")
    out = tmp_path / "results.jsonl"
    child = start_batch(file_config.run_store, first, out, batch_env)
    wait_for_results(out, child, 2)
    child.send_signal(signal.SIGKILL)
    child.wait()
    assert (tmp_path / ".results.jsonl.lock").exists()  # no chance to remove it, but the kernel let go of it

    report = submit_batch(ItemAgent, second, concurrency=1, out=out, progress=False)

    assert report.ok and [r["line"] for r in read_results(out)] == [1]


def test_the_same_batch_submitted_twice_gets_the_batch_claims_message(file_config, inputs, batch_env, tmp_path):
    path = inputs([f"item {n}" for n in range(1, 11)])
    out = tmp_path / "results.jsonl"
    child = start_batch(file_config.run_store, path, out, batch_env)
    try:
        wait_for_results(out, child, 1)
        with pytest.raises(RunStateError, match="is being submitted by process .*looks alive"):
            submit_batch(ItemAgent, path, concurrency=2, out=out, progress=False)
    finally:
        child.kill()
        child.wait()


def test_the_lock_records_its_holder_and_refuses_a_second_one(tmp_path):
    out = tmp_path / "results.jsonl"
    held = OutputLock(out)
    assert held.acquire("batch-a", "host:1:2") is None

    assert OutputLock(out).acquire("batch-b", "host:3:4") == {"batch_id": "batch-a", "holder": "host:1:2"}
    with pytest.raises(InvocationError, match=r"batch batch-a \(process host:1:2\)"):
        with output_locked(out, "batch-b", "host:3:4"):
            pass
    held.release()

    assert not held.path.exists()
    with output_locked(out, "batch-b", "host:3:4"):
        assert OutputLock(out).acquire("batch-c", "host:5:6") == {"batch_id": "batch-b", "holder": "host:3:4"}
    assert not held.path.exists()


def test_outputs_that_are_not_regular_files_are_not_locked(tmp_path):
    with output_locked(tmp_path / "missing-dir" / "results.jsonl", "batch-a", "h"):  # nothing to lock beside
        pass
    with output_locked(None, "batch-a", "h"):
        pass
    stdout = Path("/dev/stdout")
    with output_locked(stdout, "batch-a", "h"), output_locked(stdout, "batch-b", "h"):
        pass  # two batches may both print to a terminal or a pipe
