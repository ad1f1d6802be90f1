"""Model-call rate limits: the syntax, GCRA by reservation, and runs whose model calls wait for their slot."""

from __future__ import annotations

import random
import threading
import time

import pytest

from lg_core import Agent, Configuration, InvocationError, Tool, with_configuration
from lg_core.rate_limit import LocalLimiter, RateLimit
from tests.support.pacing import early_calls, first_model_claim


@pytest.mark.parametrize(
    ("text", "count", "period"),
    [
        ("10/s", 10, 1),
        ("2.5/sec", 2.5, 1),
        ("600/min", 600, 60),
        ("5 / minute", 5, 60),
        ("1000/h", 1000, 3600),
        ("3/seconds", 3, 1),
        ("7/HOUR", 7, 3600),
    ],
)
def test_rate_limit_syntax(text, count, period):
    limit = RateLimit.parse(text)
    assert (limit.count, limit.period) == (count, period)
    assert limit.interval == pytest.approx(period / count)


@pytest.mark.parametrize(
    "text", ["10", "/s", "10/", "ten/s", "10/ms", "10/m", "10/day", "0/s", "-1/s", "1e3/s", None, 5]
)
def test_bad_rate_limits_say_what_is_accepted(text):
    with pytest.raises(InvocationError, match="N/s, N/min or N/h"):
        RateLimit.parse(text)


# Tiny and long rates too: the text goes on to every run of a batch, which parses it again.
@pytest.mark.parametrize(
    "text", ["10/s", "2.5/s", "600/min", "1000000/h", "0.25/min", "0.0000001/s", "0.0000005/s", "1.23456789/s"]
)
def test_the_canonical_text_reads_back_to_the_same_limit(text):
    limit = RateLimit.parse(text)
    assert str(limit) == text
    assert RateLimit.parse(str(limit)) == limit


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_calls_reserve_slots_spaced_by_the_interval_per_connection():
    clock = Clock()
    limiter = LocalLimiter(clock=clock)
    limit = RateLimit.parse("4/s")

    assert limiter.reserve("openai", limit) == 0.0
    assert limiter.reserve("openai", limit) == pytest.approx(0.25)  # queued behind the first
    assert limiter.reserve("openai", limit) == pytest.approx(0.5)
    assert limiter.reserve("anthropic", limit) == 0.0  # another connection, another budget
    clock.now += 0.6
    assert limiter.reserve("openai", limit) == pytest.approx(0.15)
    clock.now += 10  # idle time does not build up a burst
    assert limiter.reserve("openai", limit) == 0.0
    assert limiter.reserve("openai", limit) == pytest.approx(0.25)


def test_any_window_of_one_period_holds_at_most_n_calls():
    clock = Clock()
    limiter = LocalLimiter(clock=clock)
    limit = RateLimit.parse("5/s")
    rng = random.Random(7)
    calls = []
    for _ in range(300):  # callers arriving at random, each waiting for its reserved slot
        clock.now += rng.expovariate(8.0)
        calls.append(clock.now + limiter.reserve("c", limit))
    assert max(count_in_window(calls, 1.0)) <= 5
    assert calls == sorted(calls)  # slots are served in the order they were reserved


def count_in_window(times: list[float], width: float) -> list[int]:
    """For each call, how many calls fall in the half-open window of ``width`` seconds it opens.

    A call exactly one width later belongs to the next window; the 1e-9 keeps float
    sums of intervals (0.2 + 0.2 + ...) from landing a hair inside.
    """
    times = sorted(times)
    return [sum(1 for t in times[i:] if t < start + width - 1e-9) for i, start in enumerate(times)]


# -- runs ------------------------------------------------------------------------------


class NoteTool(Tool):
    description = "Take a note."
    input_schema = {"type": "object", "properties": {"note": {"type": "string"}}}

    def call(self, input):
        return "noted"


def recording_model(script, calls: list[float], tool_turns: int) -> str:
    """A scripted model that records when each call reaches it and makes ``tool_turns`` tool calls first."""

    def turn(request):
        calls.append(time.time())  # the clock of the steps' times (tests.support.pacing)
        if request.metadata["sequence"] < tool_turns:
            return {"tool_calls": [{"name": "note", "arguments": {"note": "n"}}]}
        return {"text": "done"}

    return script(turn)


def agent_on(model: str) -> type[Agent]:
    return type("PacedAgent", (Agent,), {"model": model, "tools": [NoteTool]})


def test_a_runs_model_calls_wait_for_their_slots(config, script):
    calls: list[float] = []
    agent = agent_on(recording_model(script, calls, tool_turns=3))

    run = agent.ask("go", rate_limit="10/s")

    assert run.completed
    assert len(calls) == 4
    store = config.runtime().store
    assert (
        early_calls(calls, first_model_claim(store, [run.id]), 0.1) == []
    )  # slots 100 ms apart (unpaced: a few ms in all)
    stored = store.load_run(run.id)
    assert stored.invocation["rate_limit"] == "10/s"  # persisted: a resumed run keeps its pace


class FarLimiter:
    """A limiter whose requests take ``travel`` seconds to arrive, like Redis under load: it
    answers "your slot is N seconds from now" as of when it reads the request."""

    def __init__(self, travel: float) -> None:
        self.inner, self.travel = LocalLimiter(), travel
        self.slots: list[float] = []

    def reserve(self, connection: str, limit: RateLimit) -> float:
        time.sleep(self.travel)
        wait = self.inner.reserve(connection, limit)
        self.slots.append(time.monotonic() + wait)
        return wait


def test_a_call_waits_for_its_slot_however_long_the_reservation_took_to_arrive(config, script, monkeypatch):
    """The wait a limiter answers is counted from its answer, not from the question: counted
    from before the round trip, a call went that much before its slot (Redis on a loaded
    machine: calls tens of ms early, more than 10 in a second at 10/s)."""
    limiter = FarLimiter(travel=0.3)
    monkeypatch.setattr(type(config.runtime()), "rate_limiter", property(lambda _runtime: limiter))
    calls: list[float] = []

    def turn(request):
        calls.append(time.monotonic())
        return (
            {"tool_calls": [{"name": "note", "arguments": {"note": "n"}}]}
            if request.metadata["sequence"] < 2
            else {"text": "done"}
        )

    run = agent_on(script(turn)).ask("go", rate_limit="2/s")

    assert run.completed
    assert len(calls) == len(limiter.slots) == 3
    assert [round(call - slot, 3) for call, slot in zip(calls, limiter.slots, strict=True) if call < slot] == []


def test_a_configured_limit_paces_every_run_on_its_connection(script):
    """configure(rate_limits=...) needs nothing from the caller."""
    config = Configuration(rate_limits={"scripted": "10/s"})
    calls: list[float] = []
    agent = agent_on(recording_model(script, calls, tool_turns=3))
    with with_configuration(config):
        run = agent.ask("go")
        first_claim = first_model_claim(config.runtime().store, [run.id])
    config.close()
    assert run.completed
    assert len(calls) == 4
    assert early_calls(calls, first_claim, 0.1) == []  # four calls in slots 100 ms apart


def test_a_runs_own_limit_replaces_the_configured_one(script):
    """A run's own, faster rate_limit takes precedence: behind the configured 1/min its
    second call would wait a minute, and its deadline would end it partial."""
    config = Configuration(rate_limits={"scripted": "1/min"})
    calls: list[float] = []
    agent = agent_on(recording_model(script, calls, tool_turns=3))
    with with_configuration(config):
        run = agent.ask("go", rate_limit="1000/s", deadline=30)
    config.close()
    assert run.completed, run.error
    assert len(calls) == 4


def test_runs_limited_on_one_connection_share_its_budget(config, script):
    calls: list[float] = []
    agent = agent_on(recording_model(script, calls, tool_turns=1))

    executions = [agent.start_execution(f"run {n}", rate_limit="10/s") for n in range(3)]
    runs = [execution.wait(timeout=60) for execution in executions]

    assert all(run.completed for run in runs)
    assert len(calls) == 6
    first_claim = first_model_claim(config.runtime().store, [run.id for run in runs])
    assert (
        early_calls(calls, first_claim, 0.1) == []
    )  # six slots 100 ms apart; a budget per run lets three calls in at once


def test_connections_have_their_own_budgets(script):
    """One call each on two connections limited to 1/min: neither waits for the other's slot."""
    config = Configuration(providers={"other": {"adapter": "scripted"}})
    calls: list[float] = []
    target = recording_model(script, calls, tool_turns=0)
    minute = RateLimit.parse("1/min")
    with with_configuration(config):
        first = agent_on(target).ask("one", rate_limit=minute)
        # Behind a shared budget this call would wait a minute: its deadline would end it partial.
        second = agent_on(target.replace("scripted:", "other:", 1)).ask("two", rate_limit=minute, deadline=10)
        limiter = config.runtime().rate_limiter
        next_slots = [limiter.reserve(name, minute) for name in ("scripted", "other")]
    config.close()
    assert first.completed and second.completed
    assert next_slots == [pytest.approx(60, abs=20)] * 2  # each connection spent exactly its own slot (else 0 or 120)


def test_a_run_waiting_for_its_slot_can_be_cancelled(config, script):
    calls: list[float] = []
    agent = agent_on(recording_model(script, calls, tool_turns=1))
    tool_done = threading.Event()

    def on_event(event):
        if event.type == "tool_execution_stop":
            tool_done.set()

    execution = agent.start_execution("go", rate_limit="1/min", on_event=on_event)
    assert tool_done.wait(30)
    execution.cancel()
    run = execution.wait(timeout=30)

    assert run.cancelled
    assert len(calls) == 1  # the second call never reached the provider


def test_a_deadline_ends_the_wait_with_a_partial_run(config, script):
    calls: list[float] = []
    agent = agent_on(recording_model(script, calls, tool_turns=1))

    run = agent.ask(
        "go", rate_limit="1/min", deadline=2.0
    )  # the first call comes well before it; the second waits a minute

    assert run.outcome == "partial"
    assert len(calls) == 1


@pytest.mark.parametrize("value", ["fast", "0/s", 10, {"count": 1}])
def test_a_bad_rate_limit_fails_before_a_run_exists(config, script, value):
    agent = agent_on(recording_model(script, [], tool_turns=0))
    with pytest.raises(InvocationError, match="rate limit"):
        agent.ask("go", rate_limit=value)
    assert config.runtime().list_runs() == []
