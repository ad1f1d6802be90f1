"""``start_execution`` with a caller's run id is idempotent: the same request again re-attaches.

A web client retries ``POST /runs`` after a timeout; with its idempotency key
as ``run_id`` the retry must get the first try's run, not a second run (its
tools would run twice) and not an error for a run it did start.
"""

from __future__ import annotations

import threading

import pytest

from lg_core import Agent, InvocationError, Tool
from lg_core.providers import scripted
from tests.engine.numbered_tool import numbered_calls


class CountingTool(Tool):
    tool_name = "numbered"
    description = "Count calls."
    input_schema = {"type": "object", "properties": {"n": {"type": "integer"}}}
    calls = 0
    lock = threading.Lock()

    def call(self, input):
        with CountingTool.lock:
            CountingTool.calls += 1
        return "counted"


scripted.register("idempotent-start", numbered_calls(1))


class OrderAgent(Agent):
    model = "scripted:idempotent-start"
    tools = [CountingTool]


class OtherAgent(OrderAgent):
    pass


@pytest.fixture
def agent():
    CountingTool.calls = 0
    return OrderAgent


def test_the_same_request_again_gets_the_first_run(config, agent):
    first = agent.start_execution("Where is order 481?", run_id="req-7", context={"account_id": "a-2"}, deadline=60)
    again = agent.start_execution("Where is order 481?", run_id="req-7", context={"account_id": "a-2"}, deadline=60)

    assert again.run_id == first.run_id == "req-7"
    assert again.wait(timeout=30).outcome == first.wait(timeout=30).outcome == "completed"
    assert CountingTool.calls == 1
    assert [r.id for r in config.runtime().list_runs()] == ["req-7"]


def test_a_different_request_under_a_used_run_id_is_refused(config, agent):
    agent.start_execution("Where is order 481?", run_id="req-8").wait(timeout=30)

    with pytest.raises(InvocationError, match="'req-8' already exists"):
        agent.start_execution("Cancel order 481", run_id="req-8")
    with pytest.raises(InvocationError, match="already exists"):
        agent.start_execution("Where is order 481?", run_id="req-8", context={"account_id": "other"})
    with pytest.raises(InvocationError, match="already exists"):
        OtherAgent.start_execution("Where is order 481?", run_id="req-8")
    assert CountingTool.calls == 1


class GatedTool(Tool):
    """The second call waits at a gate, so the test acts while the run is in its second tool step."""

    tool_name = "numbered"
    description = "Wait at the gate on the second call."
    input_schema = {"type": "object", "properties": {"n": {"type": "integer"}}}
    first_done = threading.Event()
    entered = threading.Event()
    gate = threading.Event()

    def call(self, input):
        if input["n"] == 1:
            GatedTool.first_done.wait(30)
        else:
            GatedTool.entered.set()
            GatedTool.gate.wait(30)
        return "ok"


scripted.register("idempotent-start-gated", numbered_calls(1, 2))


class GatedAgent(Agent):
    model = "scripted:idempotent-start-gated"
    tools = [GatedTool]


def test_the_first_callers_token_still_cancels_its_run_after_a_repeated_request(config):
    from lg_core import CancellationToken

    for event in (GatedTool.first_done, GatedTool.entered, GatedTool.gate):
        event.clear()
    token = CancellationToken()
    first = GatedAgent.start_execution("go", run_id="req-9", cancellation_token=token)
    GatedAgent.start_execution("go", run_id="req-9")  # the client's retry re-attaches
    GatedTool.first_done.set()
    assert GatedTool.entered.wait(30)
    token.cancel("the client went away")
    GatedTool.gate.set()

    assert first.wait(timeout=30).outcome == "cancelled"


def test_a_repeated_requests_on_event_follows_the_run_it_reattached_to(config, agent):
    first = agent.start_execution("Where is order 481?", run_id="req-9")
    seen, done = [], threading.Event()

    def on_event(event):
        seen.append(event.type)
        if event.terminal:
            done.set()

    agent.start_execution("Where is order 481?", run_id="req-9", on_event=on_event)
    first.wait(timeout=30)
    assert done.wait(30)
    assert seen[0] == "invocation_start" and seen[-1] == "run_stop"
