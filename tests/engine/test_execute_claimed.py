"""Engine.execute_claimed, the Celery tasks' protocol, without Celery.

A worker claims a step and reads its frame in one store call; these tests
check every outcome of that start (executed, done, held, missing, a dead
holder's step taken over) on a real SQLite file shared by two runtimes
playing the client and a worker.
"""

from __future__ import annotations

from collections import deque

import pytest

from lg_core import Agent, Configuration, Tool, with_configuration
from lg_core.lease_holders import current_holder, hostname
from lg_core.providers import scripted
from tests.engine.numbered_tool import NumberedTool, numbered_calls

scripted.register("execute-claimed", numbered_calls(1, 2))
FANOUT_TURNS = 4
scripted.register(
    "execute-claimed-fanout",
    [
        *(
            {"tool_calls": [{"name": "numbered", "arguments": {"n": 2 * t + i}} for i in range(2)]}
            for t in range(FANOUT_TURNS)
        ),
        {"text": "done"},
    ],
)


class EchoAgent(Agent):
    model = "scripted:execute-claimed"
    tools = [NumberedTool]


class AppendLaterTool(Tool):
    tool_name = "append_later"
    description = "Append a value JSON cannot hold to a list in the working state (DataMap does not see it)."

    def call(self, input):
        self.context.state["items"].append({"when": object()})
        return "appended"


scripted.register(
    "execute-claimed-bad-state", [{"tool_calls": [{"name": "append_later", "arguments": {}}]}, {"text": "done"}]
)


class BadStateAgent(Agent):
    model = "scripted:execute-claimed-bad-state"
    tools = [AppendLaterTool]


@pytest.fixture
def fleet(tmp_path):
    """A client and two workers (one runtime each) on one SQLite file."""
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    configs = [Configuration(run_store=url) for _ in range(3)]
    yield [config.runtime() for config in configs]
    for config in configs:
        config.close()


class FanOutAgent(Agent):
    model = "scripted:execute-claimed-fanout"
    tools = [NumberedTool]


def _start(client, agent=EchoAgent):
    with with_configuration(client.configuration):
        (ref,) = client.begin(agent.build_run("go"), distributed=True)
    return ref


def _dead_holder() -> str:
    """A holder on this host whose process has ended (a pid that no longer runs this process's start time)."""
    return f"{hostname()}:{2**22 + 17}:1"


def test_workers_alternating_on_one_run_see_every_message(fleet):
    """Each claim reads only the tail its worker's cache lacks, and the run still sees the whole conversation."""
    client, first, second = fleet
    queue = deque([_start(client)])
    turn = 0
    while queue:
        ref = queue.popleft()
        worker = (first, second)[turn % 2]
        turn += 1
        outcome, successors = worker.engine.execute_claimed(ref.run_id, ref.key)
        assert outcome == "executed", (ref, outcome)
        queue.extend(successors)
    record = client.store.load_run(ref.run_id)
    assert (record.status, record.response) == ("completed", "done")
    frame = client.store.load_frame(f"{ref.run_id}/root")
    assert len(client.store.load_messages(frame.id)) == frame.checkpoint["message_count"] == 6
    for engine in (first.engine, second.engine):  # no worker cached a conversation with a hole in it
        cached = engine.frames.get(frame.id)
        assert len(cached.messages) == cached.checkpoint.message_count


def test_a_workers_claim_reads_the_run_it_has_not_rebuilt_and_no_separate_read_follows(fleet, monkeypatch):
    """The first step of a run on a worker gets the run's row with its claim (one round trip on
    PostgreSQL) instead of a load_run of its own; once the worker has the run, claims skip it."""
    client, worker, _ = fleet
    store = worker.store
    asked, loads = [], []
    claim_and_load, load_run = store.claim_and_load, store.load_run

    def claim(*args, **kwargs):
        start = claim_and_load(*args, **kwargs)
        asked.append((kwargs["with_run"], start.run is not None))
        return start

    def load(run_id):
        loads.append(run_id)
        return load_run(run_id)

    monkeypatch.setattr(store, "claim_and_load", claim)
    monkeypatch.setattr(store, "load_run", load)
    queue = deque([_start(client)])
    while queue:
        ref = queue.popleft()
        outcome, successors = worker.engine.execute_claimed(ref.run_id, ref.key)
        assert outcome == "executed"
        queue.extend(successors)
    assert asked[0] == (True, True)  # the run's row came with the first claim
    assert all(entry == (False, False) for entry in asked[1:])
    assert loads == []
    assert client.store.load_run(ref.run_id).status == "completed"


def test_a_worker_step_whose_state_cannot_be_stored_ends_the_run_failed_not_a_retried_attempt(fleet):
    """The worker's step ends the run in its commit, as a local one does, with the state of the
    last commit: a commit failing in the store's encoder instead raised out of the attempt,
    which was retried until max_step_attempts, the run running meanwhile."""
    client, worker, _ = fleet
    with with_configuration(client.configuration):
        (ref,) = client.begin(BadStateAgent.build_run("go", context={"items": ["kept"]}), distributed=True)
    queue, outcomes = deque([ref]), []
    while queue:
        step = queue.popleft()
        outcome, successors = worker.engine.execute_claimed(step.run_id, step.key)
        outcomes.append(outcome)
        queue.extend(successors)
    assert outcomes == ["executed", "executed"]
    record = client.store.load_run(ref.run_id)
    assert record.status == "failed" and record.error["name"] == "ConfigurationError"
    assert "context.state.items[1].when is a object" in record.error["message"]
    assert client.store.load_events(ref.run_id)[-1].type == "run_error"
    assert client.store.load_frame(f"{ref.run_id}/root").checkpoint["state"] == {"items": ["kept"]}


def test_a_redelivered_finished_step_is_done_and_reannounces_open_steps(fleet):
    client, worker, _ = fleet
    ref = _start(client)
    outcome, successors = worker.engine.execute_claimed(ref.run_id, ref.key)
    assert outcome == "executed" and [s.kind for s in successors] == ["tool"]
    again, announced = worker.engine.execute_claimed(ref.run_id, ref.key)
    assert (again, announced) == ("done", successors)


def test_a_duplicate_message_behind_a_backlog_costs_one_delivery_not_a_chain(fleet):
    """The relay re-sends a step its queue has not reached within the grace, so under a
    backlog the original and the copy both arrive, the copy after the step finished. The
    copy is a fresh message, not a redelivery: re-announcing the run's scheduled steps
    from it sent copies of those too, each of which did the same at the next turn, two
    per turn with two tool calls (74 deliveries for this 13-step run, 1046 for 25 steps).
    """
    client, worker, _ = fleet
    first = _start(client, FanOutAgent)
    queue = deque([(first, False), (first, False)])  # a broker queue (FIFO): the original, the relay's copy
    delivered = 0
    while queue:
        ref, redelivered = queue.popleft()
        delivered += 1
        _outcome, successors = worker.engine.execute_claimed(ref.run_id, ref.key, redelivered=redelivered)
        queue.extend((successor, False) for successor in successors)
    assert client.store.load_run(first.run_id).status == "completed"
    steps = 1 + 3 * FANOUT_TURNS  # each turn: a model step and two tool calls; then the final turn
    assert delivered == steps + 1


def test_a_redelivery_of_a_finished_step_reannounces_only_when_redelivered(fleet):
    client, worker, _ = fleet
    ref = _start(client)
    _outcome, successors = worker.engine.execute_claimed(ref.run_id, ref.key)
    assert worker.engine.execute_claimed(ref.run_id, ref.key, redelivered=False) == ("done", [])
    assert worker.engine.execute_claimed(ref.run_id, ref.key, redelivered=True) == ("done", successors)


def test_a_step_held_by_a_live_process_is_left_alone(fleet):
    client, worker, _ = fleet
    ref = _start(client)
    assert client.store.claim_step(ref.run_id, ref.key, current_holder(), 30) == 1  # this process, alive
    assert worker.engine.execute_claimed(ref.run_id, ref.key) == ("held", [])
    assert client.store.load_step(ref.run_id, ref.key).attempts == 1


def test_a_dead_holders_step_is_taken_over_as_a_second_attempt(fleet):
    client, worker, _ = fleet
    ref = _start(client)
    assert client.store.claim_step(ref.run_id, ref.key, _dead_holder(), 30) == 1
    outcome, successors = worker.engine.execute_claimed(ref.run_id, ref.key)
    assert outcome == "executed" and successors
    step = client.store.load_step(ref.run_id, ref.key)
    assert (step.status, step.attempts) == ("succeeded", 2)


def test_missing_steps_and_finished_runs(fleet):
    client, worker, _ = fleet
    ref = _start(client)
    assert worker.engine.execute_claimed(ref.run_id, "root/turn-9/model") == ("missing", [])
    assert worker.engine.execute_claimed("no-such-run", ref.key) == ("missing", [])
    assert worker.engine.end_run(ref.run_id, "cancelled", None)
    assert worker.engine.execute_claimed(ref.run_id, ref.key) == ("done", [])
    assert client.store.load_step(ref.run_id, ref.key).attempts == 0  # never claimed
