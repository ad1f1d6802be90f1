"""Rate limits: the syntax, the GCRA limiter on a controlled clock, and a batch's starts as the store recorded them."""

from __future__ import annotations

import pytest

from lg_core import Configuration, InvocationError, with_configuration
from lg_scheduler.batch import submit_batch
from lg_scheduler.batch_inputs import read_inputs
from lg_scheduler.rate_limit import LocalLimiter, RateLimit
from tests.batch.batch_app import ItemAgent


@pytest.mark.parametrize(
    ("text", "count", "period"),
    [("10/s", 10, 1), ("2.5/sec", 2.5, 1), ("600/min", 600, 60), ("5 / minute", 5, 60), ("1000/h", 1000, 3600),
     ("3/seconds", 3, 1), ("7/HOUR", 7, 3600)],
)
def test_rate_limit_syntax(text, count, period):
    limit = RateLimit.parse(text)
    assert (limit.count, limit.period) == (count, period)
    assert limit.interval == pytest.approx(period / count)


@pytest.mark.parametrize("text", ["10", "/s", "10/", "ten/s", "10/ms", "10/m", "10/day", "0/s", "-1/s", "1e3/s", None, 5])
def test_bad_rate_limits_say_what_is_accepted(text):
    with pytest.raises(InvocationError, match="N/s, N/min or N/h"):
        RateLimit.parse(text)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_starts_are_spaced_by_the_interval_per_connection():
    clock = Clock()
    limiter = LocalLimiter(RateLimit.parse("4/s"), clock=clock)

    assert limiter.try_acquire("openai") == 0.0
    assert limiter.try_acquire("openai") == pytest.approx(0.25)  # the next start is a quarter second away
    assert limiter.try_acquire("anthropic") == 0.0  # other connections have their own budget
    clock.now += 0.1
    assert limiter.try_acquire("openai") == pytest.approx(0.15)
    clock.now += 0.15
    assert limiter.try_acquire("openai") == 0.0
    clock.now += 10  # idle time does not build up a burst
    assert limiter.try_acquire("openai") == 0.0
    assert limiter.try_acquire("openai") == pytest.approx(0.25)


def test_any_window_of_one_period_holds_at_most_n_starts():
    clock = Clock()
    limiter = LocalLimiter(RateLimit.parse("5/s"), clock=clock)
    granted = []
    for _ in range(2000):  # callers polling every 7 ms for 14 s
        if limiter.try_acquire("c") == 0.0:
            granted.append(clock.now)
        clock.now += 0.007
    assert max(count_in_window(granted, 1.0)) <= 5
    assert len(granted) >= 60  # and the limit is used, not starved


def count_in_window(times: list[float], width: float) -> list[int]:
    """For each start, how many starts fall in the half-open window of ``width`` seconds it opens."""
    times = sorted(times)
    return [sum(1 for t in times[i:] if t < start + width) for i, start in enumerate(times)]


def test_a_batch_starts_runs_no_faster_than_its_rate_limit(file_config, inputs):
    """Starts counted from the store's run created_at timestamps, per one-second window.

    The bound is 10 per second plus one for the window's edge plus 2 for the time
    between granting a start and writing the run's row (0.2 s of slack); without
    the limit all 20 runs start within a fraction of a second.
    """
    report = submit_batch(ItemAgent, inputs([f"item {n}" for n in range(20)]), concurrency=20, rate_limit="10/s", progress=False)

    assert report.completed == 20
    starts = [file_config.runtime().store.load_run(r["run_id"]).created_at for r in report.results]
    assert max(count_in_window(starts, 1.0)) <= 13


def test_each_item_is_limited_under_the_connection_its_model_uses(tmp_path, inputs):
    config = Configuration(run_store=f"sqlite:///{tmp_path / 'runs.db'}", providers={"other": {"adapter": "scripted"}})
    lines = ["default", {"message": "elsewhere", "metadata": {"connection": "other"}}]
    with with_configuration(config):
        items = read_inputs(inputs(lines), ItemAgent, config.runtime().resolver).items
    config.close()
    assert [item.connection for item in items] == ["scripted", "other"]
