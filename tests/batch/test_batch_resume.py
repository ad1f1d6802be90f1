"""A batch process SIGKILLed mid-way, then submitted again: finished items are not re-run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from lg_core.errors import RunStateError
from lg_core.store import RunStore
from lg_core.store.records import RUN_TERMINAL
from lg_scheduler.batch import submit_batch
from tests.batch.batch_app import ItemAgent, logged_items
from tests.batch.conftest import read_results

ROOT = Path(__file__).resolve().parents[2]
ITEMS = 30


def start_batch(store_url: str, path: Path, out: Path, batch_env: Path) -> subprocess.Popen:
    """``lg batch submit`` in a child process whose model turns take 0.2 s."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LG_")}
    env.update(PYTHONPATH=str(ROOT), BATCH_APP_LOG=str(batch_env), BATCH_APP_DELAY="0.2")
    argv = [
        sys.executable,
        "-m",
        "lg_core.cli",
        "batch",
        "submit",
        "tests.batch.batch_app:ItemAgent",
        str(path),
        "--concurrency",
        "5",
        "--out",
        str(out),
        "--store",
        store_url,
        "--no-progress",
    ]
    return subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def wait_for_results(out: Path, child: subprocess.Popen, count: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if child.poll() is not None:
            assert child.stderr is not None
            raise AssertionError(f"the batch exited early:\n{child.stderr.read().decode()}")
        if out.exists() and len(out.read_text().splitlines()) >= count:
            return
        time.sleep(0.02)
    raise AssertionError(f"fewer than {count} results after {timeout} s")


@pytest.mark.chaos
def test_a_killed_batch_resumes_without_rerunning_finished_items(file_config, inputs, batch_env, tmp_path):
    path = inputs([f"item {n}" for n in range(1, ITEMS + 1)])
    out = tmp_path / "results.jsonl"
    store_url = file_config.run_store

    child = start_batch(store_url, path, out, batch_env)
    wait_for_results(out, child, 8)
    child.send_signal(signal.SIGKILL)
    child.wait()

    store = RunStore(store_url)
    runs = {r.id: r for r in store.list_runs(limit=1000)}
    store.close()
    finished = {r.invocation["message"]["content"][0]["text"] for r in runs.values() if r.status in RUN_TERMINAL}
    interrupted = {r.id for r in runs.values() if r.status not in RUN_TERMINAL}
    assert 8 <= len(finished) < ITEMS and len(runs) < ITEMS  # really mid-way
    calls_before = Counter(logged_items(batch_env))

    report = submit_batch(ItemAgent, path, concurrency=5, out=out, progress=False)

    assert report.ok and report.completed == ITEMS
    assert report.already_finished == len(finished)
    assert report.resumed == len(interrupted)  # their submitter died with its threads: continued here
    assert report.started == ITEMS - len(runs)
    results = read_results(out)
    assert sorted(r["line"] for r in results) == list(range(1, ITEMS + 1))
    assert {r["outcome"] for r in results} == {"completed"}
    calls = Counter(logged_items(batch_env))
    assert set(calls) == {f"item {n}" for n in range(1, ITEMS + 1)}
    for item in finished:
        assert calls[item] == calls_before[item] == 1, item  # finished before the kill: never run again
    # An item interrupted inside its tool call may repeat that (idempotent) call once; no other item repeats.
    assert sum(calls.values()) <= ITEMS + len(interrupted)
    record = RunStore(store_url).load_batch(report.batch_id)
    assert (record.status, record.completed, record.holder) == ("finished", ITEMS, None)


@pytest.mark.chaos
def test_forcing_a_takeover_stops_the_old_submitter(file_config, inputs, batch_env, tmp_path):
    path = inputs([f"item {n}" for n in range(1, ITEMS + 1)])
    out = tmp_path / "results.jsonl"
    child = start_batch(file_config.run_store, path, out, batch_env)
    wait_for_results(out, child, 3)

    report = submit_batch(ItemAgent, path, concurrency=5, out=tmp_path / "taken-over.jsonl", progress=False, force=True)

    _stdout, stderr = child.communicate(timeout=60)
    assert child.returncode == 2 and "was taken over by another process" in stderr.decode()
    assert report.ok and report.completed == ITEMS
    assert sorted(r["line"] for r in read_results(tmp_path / "taken-over.jsonl")) == list(range(1, ITEMS + 1))
    assert set(logged_items(batch_env)) == {f"item {n}" for n in range(1, ITEMS + 1)}


@pytest.mark.chaos
def test_runs_whose_process_dies_while_the_batch_waits_for_them_are_resumed(file_config, inputs, batch_env, tmp_path):
    path = inputs([f"item {n}" for n in range(1, ITEMS + 1)])
    out = tmp_path / "results.jsonl"
    child = start_batch(file_config.run_store, path, out, batch_env)
    wait_for_results(out, child, 3)

    def kill_the_old_submitter(report) -> None:
        """Its runs were in flight on its threads when this submit looked; now their process is gone."""
        assert report.waited >= 1
        child.send_signal(signal.SIGKILL)
        child.wait()

    report = submit_batch(
        ItemAgent, path, concurrency=5, out=out, progress=False, force=True, on_start=kill_the_old_submitter
    )

    assert report.ok and report.completed == ITEMS
    # The old submitter may start a few more runs between this submit's first look and the kill,
    # so resumed can exceed waited; what matters is that dead runs were resumed and all finished once.
    assert report.resumed >= 1
    assert sorted(r["line"] for r in read_results(out)) == list(range(1, ITEMS + 1))
    assert set(logged_items(batch_env)) == {f"item {n}" for n in range(1, ITEMS + 1)}


@pytest.mark.chaos
def test_ctrl_c_stops_a_batch_promptly_and_the_next_submit_resumes_it(file_config, inputs, batch_env, tmp_path):
    """Ctrl-C while 8 runs are in their first minute-long model turn: the submit gives its runs a
    few seconds in all, not a few seconds each (8 x 5 s), then exits; the next submit resumes them."""
    path = inputs([f"item {n}" for n in range(1, 21)])
    out = tmp_path / "results.jsonl"
    env = {k: v for k, v in os.environ.items() if not k.startswith("LG_")}
    env.update(PYTHONPATH=str(ROOT), BATCH_APP_LOG=str(batch_env), BATCH_APP_DELAY="60")
    argv = [
        sys.executable,
        "-m",
        "lg_core.cli",
        "batch",
        "submit",
        "tests.batch.batch_app:ItemAgent",
        str(path),
        "--concurrency",
        "8",
        "--out",
        str(out),
        "--store",
        file_config.run_store,
        "--no-progress",
    ]
    # SIGINT as a terminal's Ctrl-C delivers it, even where this test's own SIGINT is ignored (a background job).
    child = subprocess.Popen(
        argv,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    store = RunStore(file_config.run_store)
    deadline = time.monotonic() + 30
    while [r.status for r in store.list_runs(limit=100)] != ["running"] * 8:
        assert time.monotonic() < deadline and child.poll() is None, "the batch never had 8 runs in flight"
        time.sleep(0.02)
    store.close()

    child.send_signal(signal.SIGINT)
    try:
        _stdout, stderr = child.communicate(timeout=25)
    except subprocess.TimeoutExpired:
        child.kill()
        child.communicate()
        pytest.fail("Ctrl-C left the batch waiting for every in-flight run in turn")
    assert child.returncode == 130 and "interrupted" in stderr.decode()

    report = submit_batch(ItemAgent, path, concurrency=8, out=out, progress=False)

    assert report.ok and report.resumed == 8 and report.started == 12
    assert sorted(r["line"] for r in read_results(out)) == list(range(1, 21))


def kill_mid_way(store_url: str, path: Path, out: Path, batch_env: Path, results: int) -> None:
    child = start_batch(store_url, path, out, batch_env)
    wait_for_results(out, child, results)
    child.send_signal(signal.SIGKILL)
    child.wait()


def kill_with_runs_in_flight(store_url: str, path: Path, out: Path, batch_env: Path, results: int) -> None:
    """SIGKILL the submitter once ``results`` results are written and a run of it is running."""
    child = start_batch(store_url, path, out, batch_env)
    wait_for_results(out, child, results)
    store = RunStore(store_url)
    deadline = time.monotonic() + 30
    while not any(r.status == "running" for r in store.list_runs(limit=100)):
        assert time.monotonic() < deadline and child.poll() is None, "no run was in flight to interrupt"
        time.sleep(0.005)
    child.send_signal(signal.SIGKILL)
    child.wait()
    store.close()


def kill_while_the_second_item_waits(file_config, inputs, batch_env, tmp_path):
    """Submit two items of one session and SIGKILL the submitter while item 1 runs and item 2 waits."""
    path = inputs([{"message": "first", "session_id": "s1"}, {"message": "second", "session_id": "s1"}])
    out = tmp_path / "results.jsonl"
    child = start_batch(file_config.run_store, path, out, batch_env)
    store = RunStore(file_config.run_store)
    deadline = time.monotonic() + 30
    while sorted(r.status for r in store.list_runs(limit=10)) != ["pending", "running"]:
        assert time.monotonic() < deadline and child.poll() is None, "the second run never waited for the first"
        time.sleep(0.01)
    child.send_signal(signal.SIGKILL)
    child.wait()
    store.close()
    return path, out


@pytest.mark.chaos
def test_items_waiting_for_their_session_resume_once_their_turn_comes(file_config, inputs, batch_env, tmp_path):
    """Killed while item 1 runs and item 2 waits for the same session: the next submit finishes both."""
    path, out = kill_while_the_second_item_waits(file_config, inputs, batch_env, tmp_path)

    report = submit_batch(ItemAgent, path, concurrency=5, out=out, progress=False)

    assert report.ok and report.completed == 2
    assert sorted(r["line"] for r in read_results(out)) == [1, 2]


@pytest.mark.chaos
def test_force_takes_over_a_batch_and_its_runs_from_a_host_that_is_gone(file_config, inputs, batch_env, tmp_path):
    path = inputs([f"item {n}" for n in range(1, 11)])
    out = tmp_path / "results.jsonl"
    kill_with_runs_in_flight(file_config.run_store, path, out, batch_env, 2)
    gone = "web-2:4242:1234"  # as a submitter on another host records itself; this host cannot see it die
    store = RunStore(file_config.run_store)
    with store.db.transaction() as tx:
        tx.cursor.execute("UPDATE lg_batches SET holder = ?", (gone,))
        tx.cursor.execute("UPDATE lg_runs SET holder = ? WHERE status = 'running'", (gone,))
    interrupted = [r.id for r in store.list_runs(limit=100) if r.status == "running"]
    store.close()
    assert interrupted

    with pytest.raises(RunStateError, match="--force"):
        submit_batch(ItemAgent, path, concurrency=5, out=out, progress=False)
    report = submit_batch(ItemAgent, path, concurrency=5, out=out, progress=False, force=True)

    assert report.ok and report.completed == 10
    assert report.resumed == len(interrupted)


@pytest.mark.chaos
def test_a_resume_with_a_lower_concurrency_resumes_the_run_its_waiting_runs_wait_for(
    file_config, inputs, batch_env, tmp_path
):
    """Killed while item 1 runs and item 2 waits for its session, resubmitted with --concurrency 1.

    Item 2 (pending) takes the one slot, and it can only start once item 1 (the
    dead submitter's run) ends: item 1 must be resumed anyway, or the batch waits forever.
    """
    path, out = kill_while_the_second_item_waits(file_config, inputs, batch_env, tmp_path)

    env = {k: v for k, v in os.environ.items() if not k.startswith("LG_")}
    env.update(PYTHONPATH=str(ROOT), BATCH_APP_LOG=str(batch_env))
    argv = [
        sys.executable,
        "-m",
        "lg_core.cli",
        "batch",
        "submit",
        "tests.batch.batch_app:ItemAgent",
        str(path),
        "--concurrency",
        "1",
        "--out",
        str(out),
        "--store",
        file_config.run_store,
        "--no-progress",
    ]
    again = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        _stdout, stderr = again.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        again.kill()
        again.communicate()
        pytest.fail("the resubmitted batch never finished: its waiting run holds the only slot")
    assert again.returncode == 0, stderr.decode()
    assert sorted(r["line"] for r in read_results(out)) == [1, 2]
