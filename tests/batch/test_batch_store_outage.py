"""A submit rides out a run store that cannot be reached for a while.

The submitter's own store calls (the statuses it polls, the results it reads,
the starts of its items) raise StoreUnavailableError on chosen calls, as they
do once a database stays down past their retries; the runs themselves, on
threads of this process, use the store as usual. Every item must still end
with exactly one result line and one run, and the batch row must say finished.
tests/chaos/test_postgres_crash.py crashes a real PostgreSQL under a batch on
workers.
"""

from __future__ import annotations

import threading
from collections import Counter

import pytest

from lg_core import StoreUnavailableError, current_runtime
from lg_core.store import RunStore
from lg_scheduler.batch import run_id_for, submit_batch
from tests.batch.batch_app import ItemAgent, logged_items
from tests.batch.conftest import read_results

ITEMS = 12


class Faults:
    """Makes the submitter's n-th call of a method fail (counted per method, main thread only)."""

    def __init__(self, monkeypatch) -> None:
        self.monkeypatch = monkeypatch
        self.calls: Counter[str] = Counter()
        self.failed: list[str] = []

    def fail(self, owner, name: str, on_calls: set[int], *, effect_first: frozenset[int] = frozenset()) -> None:
        """Calls ``on_calls`` raise; of those, ``effect_first`` take effect before (a start whose answer was lost)."""
        real = getattr(owner, name)

        def wrapper(*args, **kwargs):
            if threading.current_thread() is not threading.main_thread():
                return real(*args, **kwargs)
            self.calls[name] += 1
            number = self.calls[name]
            if number not in on_calls:
                return real(*args, **kwargs)
            if number in effect_first:
                real(*args, **kwargs)
            self.failed.append(f"{name}#{number}")
            raise StoreUnavailableError(f"the store's database could not be reached ({name}, injected)")

        self.monkeypatch.setattr(owner, name, wrapper)


@pytest.fixture
def no_outage_pauses(monkeypatch):
    monkeypatch.setattr("lg_scheduler._batch_submission.time.sleep", lambda _seconds: None)


def _assert_each_item_once(report, out, batch_env) -> None:
    assert report.ok and report.outcomes == {"completed": ITEMS}, report.outcomes
    assert sorted(r["line"] for r in read_results(out)) == list(range(1, ITEMS + 1))  # once each
    assert Counter(logged_items(batch_env)) == Counter(f"item {n}" for n in range(1, ITEMS + 1))
    store = current_runtime().store
    batch = store.load_batch(report.batch_id)
    assert batch is not None and batch.status == "finished"
    assert all(store.load_run(run_id_for(report.batch_id, str(n))).status == "completed" for n in range(1, ITEMS + 1))


def test_a_submit_goes_on_after_its_store_calls_fail_and_writes_each_result_once(
    file_config, inputs, batch_env, tmp_path, monkeypatch, no_outage_pauses
):
    monkeypatch.setenv("BATCH_APP_DELAY", "0.02")
    faults = Faults(monkeypatch)
    faults.fail(RunStore, "run_statuses", {2, 5})
    faults.fail(RunStore, "run_outcomes", {1})  # the first results read: nothing may be written or dropped
    faults.fail(RunStore, "update_batch", {3})
    # A start that created its run but whose answer was lost, and one that never reached the store.
    faults.fail(ItemAgent, "start_execution", {4, 9}, effect_first=frozenset({4}))
    out = tmp_path / "results.jsonl"

    report = submit_batch(
        ItemAgent, inputs([f"item {n}" for n in range(1, ITEMS + 1)]), concurrency=3, out=out, progress=False
    )

    assert {"run_statuses#2", "run_outcomes#1", "start_execution#4", "start_execution#9"} <= set(faults.failed), (
        faults.failed
    )
    _assert_each_item_once(report, out, batch_env)
    assert report.started == ITEMS  # the start whose answer was lost counts once: its run was found


def test_a_resubmit_looks_its_runs_up_again_after_a_failed_look_up(
    file_config, inputs, batch_env, tmp_path, monkeypatch, no_outage_pauses
):
    path = inputs([f"item {n}" for n in range(1, ITEMS + 1)])
    first = submit_batch(ItemAgent, path, concurrency=4, out=tmp_path / "first.jsonl", progress=False)
    assert first.ok
    faults = Faults(monkeypatch)
    faults.fail(RunStore, "run_outcomes", {1})  # while the resubmit sorts its items

    out = tmp_path / "again.jsonl"
    report = submit_batch(ItemAgent, path, concurrency=4, out=out, progress=False)

    assert faults.failed == ["run_outcomes#1"]
    assert (report.already_finished, report.started) == (ITEMS, 0)
    _assert_each_item_once(report, out, batch_env)
