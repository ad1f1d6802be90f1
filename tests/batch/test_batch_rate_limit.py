"""A batch's rate limit paces the model calls of its runs (lg_core.rate_limit), not their starts."""

from __future__ import annotations

import pytest

from lg_scheduler.batch import submit_batch
from tests.batch.batch_app import ItemAgent, logged_model_calls
from tests.engine.test_rate_limit import count_in_window


@pytest.fixture
def model_log(tmp_path, monkeypatch):
    path = tmp_path / "model-calls.log"
    monkeypatch.setenv("BATCH_APP_MODEL_LOG", str(path))
    return path


def test_a_batchs_model_calls_keep_to_its_rate_limit(file_config, inputs, model_log):
    """10 runs of 2 model calls each, all in flight at once, at 20 calls a second.

    Unlimited, the 20 calls take a few milliseconds; limited, their slots are 50 ms
    apart, so they span 0.95 s and any half-second window holds at most 10 slots.
    A call reaches the model when its thread wakes, which on a loaded machine can
    be some way behind its slot, so the bounds leave room for that lateness while
    staying far from the unlimited pace.
    """
    report = submit_batch(ItemAgent, inputs([f"item {n}" for n in range(10)]), concurrency=10, rate_limit="20/s", progress=False)

    assert report.completed == 10
    calls = [call["at"] for call in logged_model_calls(model_log)]
    assert len(calls) == 20
    assert max(count_in_window(calls, 0.5)) <= 10 + 3
    assert calls[-1] - calls[0] >= 19 * 0.05 - 0.3  # less the first call's lateness behind its slot
    store = file_config.runtime().store
    assert {store.load_run(r["run_id"]).invocation["rate_limit"] for r in report.results} == {"20/s"}


def test_the_batch_limit_replaces_an_items_own_and_an_item_may_bring_one(file_config, inputs, model_log):
    def lines(prefix):
        return [f"{prefix} plain", {"message": f"{prefix} own pace", "rate_limit": "50/s"}]

    limited = submit_batch(ItemAgent, inputs(lines("a"), name="a.jsonl"), concurrency=2, rate_limit="40/s", progress=False)
    unlimited = submit_batch(ItemAgent, inputs(lines("b"), name="b.jsonl"), concurrency=2, progress=False)

    store = file_config.runtime().store
    paces = [
        {r["id"]: store.load_run(r["run_id"]).invocation.get("rate_limit") for r in report.results}
        for report in (limited, unlimited)
    ]
    assert paces[0] == {"1": "40/s", "2": "40/s"}
    assert paces[1] == {"1": None, "2": "50/s"}


def test_a_bad_item_rate_limit_is_an_invalid_line(file_config, inputs):
    report = submit_batch(ItemAgent, inputs(["fine", {"message": "bad", "rate_limit": "fast"}]), concurrency=2,
                          progress=False, skip_invalid=True)
    assert report.completed == 1 and report.invalid == 1
    assert "rate limit 'fast' is not understood" in str(report.results)
