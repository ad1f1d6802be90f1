"""A batch's rate limit paces the model calls of its runs (lg_core.rate_limit), not their starts."""

from __future__ import annotations

import pytest

from lg_scheduler.batch import submit_batch
from tests.batch.batch_app import ItemAgent, logged_model_calls
from tests.support.pacing import early_calls, first_model_claim


@pytest.fixture
def model_log(tmp_path, monkeypatch):
    path = tmp_path / "model-calls.log"
    monkeypatch.setenv("BATCH_APP_MODEL_LOG", str(path))
    return path


def test_a_batchs_model_calls_keep_to_its_rate_limit(file_config, inputs, model_log):
    """10 runs of 2 model calls each, all in flight at once, at 10 calls a second.

    Unlimited, the 20 calls take a few hundred milliseconds; limited, their slots
    are 100 ms apart from the first model step's claim, so the k-th call comes at
    least k x 100 ms after it, the last one 1.9 s (tests.support.pacing: a call
    woken late behind its slot only comes later, so a loaded machine cannot fail this).
    """
    report = submit_batch(
        ItemAgent, inputs([f"item {n}" for n in range(10)]), concurrency=10, rate_limit="10/s", progress=False
    )

    assert report.completed == 10
    calls = [call["at"] for call in logged_model_calls(model_log)]
    assert len(calls) == 20
    store = file_config.runtime().store
    run_ids = [r["run_id"] for r in report.results]
    assert early_calls(calls, first_model_claim(store, run_ids), 0.1) == []
    assert {store.load_run(run_id).invocation["rate_limit"] for run_id in run_ids} == {"10/s"}


def test_the_batch_limit_replaces_an_items_own_and_an_item_may_bring_one(file_config, inputs, model_log):
    def lines(prefix):
        return [f"{prefix} plain", {"message": f"{prefix} own pace", "rate_limit": "50/s"}]

    limited = submit_batch(
        ItemAgent, inputs(lines("a"), name="a.jsonl"), concurrency=2, rate_limit="40/s", progress=False
    )
    unlimited = submit_batch(ItemAgent, inputs(lines("b"), name="b.jsonl"), concurrency=2, progress=False)

    store = file_config.runtime().store
    paces = [
        {r["id"]: store.load_run(r["run_id"]).invocation.get("rate_limit") for r in report.results}
        for report in (limited, unlimited)
    ]
    assert paces[0] == {"1": "40/s", "2": "40/s"}
    assert paces[1] == {"1": None, "2": "50/s"}


def test_a_bad_item_rate_limit_is_an_invalid_line(file_config, inputs):
    report = submit_batch(
        ItemAgent,
        inputs(["fine", {"message": "bad", "rate_limit": "fast"}]),
        concurrency=2,
        progress=False,
        skip_invalid=True,
    )
    assert report.completed == 1 and report.invalid == 1
    assert "rate limit 'fast' is not understood" in str(report.results)
