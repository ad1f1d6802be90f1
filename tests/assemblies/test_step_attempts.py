"""Timeouts and retries of Graph nodes and Swarm members in local mode, and their history/context opt-ins.

Each attempt of a node or member is a child run of its own, recorded in the step's
``attempts``; a timed-out attempt is an AssemblyStepTimeoutError; only the failures
``retry_on`` lists are tried again. The scripted models count their calls, so a first
attempt can fail or take too long and a second one answer.
"""

from __future__ import annotations

import threading
import time

import pytest

import lg_core
from lg_core import Agent, Graph, Message, Swarm, error_edge, member, node
from lg_core.assemblies._step_attempts import attempt_child_id
from lg_core.assemblies.child_runs import child_run_id
from lg_core.errors import AssemblyStepTimeoutError, ProviderError, RunNotFoundError
from tests.assemblies import retrying_graph


def agent(name: str, target: str) -> type[Agent]:
    return type(name, (Agent,), {"model": target})


def failing_first(*turns: dict) -> tuple[list[int], object]:
    """A model whose n-th call of all answers ``turns[n]`` (the last turn once they run out), and its call log."""
    calls: list[int] = []

    def reply(request):
        calls.append(1)
        return turns[min(len(calls), len(turns)) - 1]

    return calls, reply


def node_record(config, run, name: str) -> dict:
    frame = config.runtime().store.load_frame(f"{run.id}/root")
    return next(item for item in frame.checkpoint["data"]["done"] if item["node"] == name)


def one_node_graph(declaration) -> type[Graph]:
    class OneNodeGraph(Graph):
        nodes = {"lookup": declaration}
        start = "lookup"
        finish = "lookup"

    return OneNodeGraph


def test_a_node_retries_a_listed_failure_in_a_new_child_run_and_records_every_attempt(config, script):
    calls, reply = failing_first({"error": "provider down"}, {"text": "looked up", "usage": {"output_tokens": 5}})
    lookup = agent("LookupAgent", script(reply))

    run = one_node_graph(node(lookup, retries=2, retry_on=ProviderError)).ask("Find transfer 481")

    assert run.completed, run.error
    assert run.result.text == "looked up"
    step = run.result.trajectory.find("lookup")
    assert step.status == "completed"
    assert [attempt.number for attempt in step.attempts] == [1, 2]
    assert [attempt.status for attempt in step.attempts] == ["failed", "completed"]
    assert "ProviderError" in step.attempts[0].error and step.attempts[1].error is None
    assert all(attempt.started_at <= attempt.finished_at for attempt in step.attempts)
    assert step.attempts[0].finished_at <= step.attempts[1].started_at
    assert step.usage.output_tokens == 5
    assert len(calls) == 2
    record = node_record(config, run, "lookup")
    first, second = (attempt["child_run_id"] for attempt in record["attempts"])
    assert first == child_run_id(run.id, record["key"]) == attempt_child_id(run.id, record["key"], 1)
    assert second == attempt_child_id(run.id, record["key"], 2) != first
    store = config.runtime().store
    assert [store.load_run(first).status, store.load_run(second).status] == ["failed", "completed"]


def test_a_nodes_first_execution_reads_no_child_record_and_records_the_stored_times(config, script, monkeypatch):
    """A local node's first execution starts each attempt's child without looking it up (none can exist
    yet) and takes its times from what this process wrote, which are the child run rows' own."""
    calls, reply = failing_first({"error": "provider down"}, {"text": "looked up"})
    lookup = agent("LookupAgent", script(reply))
    store = config.runtime().store
    read: list[str] = []
    load_run = store.load_run
    monkeypatch.setattr(store, "load_run", lambda run_id: read.append(run_id) or load_run(run_id))

    run = one_node_graph(node(lookup, retries=2, retry_on=ProviderError)).ask("Find transfer 481")

    assert run.completed, run.error
    children = [attempt["child_run_id"] for attempt in node_record(config, run, "lookup")["attempts"]]
    assert len(children) == 2 and not set(read) & set(children)
    for attempt, child_id in zip(run.result.trajectory.find("lookup").attempts, children, strict=True):
        stored = load_run(child_id)
        assert attempt.started_at.timestamp() == pytest.approx(stored.created_at, abs=1e-6)
        assert attempt.finished_at.timestamp() == pytest.approx(stored.finished_at, abs=1e-6)


def test_a_node_gives_up_once_its_retries_are_spent(config, script):
    calls, reply = failing_first({"error": "provider down"})
    lookup = agent("LookupAgent", script(reply))

    run = one_node_graph(node(lookup, retries=2, retry_on=ProviderError)).ask("Find transfer 481")

    assert run.failed
    assert "graph node lookup" in str(run.error) and "provider down" in str(run.error)
    assert len(calls) == 3  # the first attempt and its two retries


def test_a_failure_retry_on_does_not_list_is_not_retried(config, script):
    calls, reply = failing_first({"error": "provider down"}, {"text": "never"})
    lookup = agent("LookupAgent", script(reply))

    run = one_node_graph(node(lookup, retries=2, retry_on=ValueError)).ask("Find transfer 481")

    assert run.failed
    assert len(calls) == 1


def test_a_node_over_its_timeout_fails_the_run_with_an_assembly_step_timeout_error(config, script):
    lookup = agent("LookupAgent", script([{"text": "too late", "delay": 3}]))

    run = one_node_graph(node(lookup, timeout=0.3)).ask("Find transfer 481")

    assert run.failed
    assert isinstance(run.error, AssemblyStepTimeoutError), run.error
    assert "graph node lookup" in str(run.error) and "timeout of 0.3 s" in str(run.error)


def test_a_timed_out_attempt_is_stopped_and_a_retry_answers_in_a_new_child(config, script):
    calls, reply = failing_first({"text": "too late", "delay": 3}, {"text": "in time"})
    lookup = agent("LookupAgent", script(reply))

    graph = one_node_graph(node(lookup, timeout=0.5, retries=1, retry_on=AssemblyStepTimeoutError))
    run = graph.ask("Find transfer 481")

    assert run.completed, run.error
    assert run.result.text == "in time"
    step = run.result.trajectory.find("lookup")
    assert [attempt.status for attempt in step.attempts] == ["timed_out", "completed"]
    assert "AssemblyStepTimeoutError" in step.attempts[0].error
    record = node_record(config, run, "lookup")
    timed_out = config.runtime().store.load_run(record["attempts"][0]["child_run_id"])
    assert timed_out.status == "partial"  # stopped at its attempt's deadline, not left running


def test_an_error_edge_routes_a_timeout_once_the_retries_are_spent(config, script):
    lookup = agent("LookupAgent", script([{"text": "too late", "delay": 3}]))
    fallback = agent("FallbackAgent", script([{"text": "answered from the cache"}]))
    respond = agent("RespondAgent", script(lambda request: {"text": "final: " + request.messages[-1].text}))

    class FallbackGraph(Graph):
        nodes = {"lookup": node(lookup, timeout=0.3), "fallback": fallback, "respond": respond}
        start = "lookup"
        edges = [
            lg_core.edge("lookup", "respond"),
            error_edge("lookup", "fallback", on=AssemblyStepTimeoutError),
            lg_core.edge("fallback", "respond"),
        ]
        finish = "respond"

    run = FallbackGraph.ask("Find transfer 481")

    assert run.completed, run.error
    assert [step.participant for step in run.result.trajectory] == ["lookup", "fallback", "respond"]
    assert "answered from the cache" in run.result.text
    step = run.result.trajectory.find("lookup")
    assert step.status == "timed_out"
    assert [attempt.status for attempt in step.attempts] == ["timed_out"]


def test_a_node_receives_the_callers_history_and_context_only_when_it_opts_in(config, script):
    seen: dict[str, list] = {"plain": [], "informed": []}

    def recorder(name):
        def reply(request):
            seen[name].append([message.text for message in request.messages])
            return {"text": f"{name} done"}

        return reply

    plain = agent("PlainAgent", script(recorder("plain")))
    informed = agent("InformedAgent", script(recorder("informed")))

    class OptInGraph(Graph):
        nodes = {"plain": plain, "informed": node(informed, history=True, context=True)}
        start = "plain"
        edges = [lg_core.edge("plain", "informed")]
        finish = "informed"

    history = [Message("user", "earlier question"), Message("assistant", "earlier answer")]
    run = OptInGraph.ask("Find transfer 481", history=history, context={"account_id": "acct-7"})

    assert run.completed, run.error
    assert seen["plain"] == [["Find transfer 481"]]
    assert seen["informed"][0][:2] == ["earlier question", "earlier answer"]
    store = config.runtime().store
    plain_run = store.load_run(node_record(config, run, "plain")["child_run_id"])
    informed_run = store.load_run(node_record(config, run, "informed")["child_run_id"])
    assert not plain_run.invocation.get("history") and not plain_run.invocation.get("context")
    assert informed_run.invocation["context"] == {"account_id": "acct-7"}


def test_a_node_executed_again_after_a_crash_finds_its_attempts_children_and_starts_no_other(config):
    retrying_graph.MODEL_CALLS.clear()
    retrying_graph.CALLS.clear()
    retrying_graph.INTERRUPT_AT[:] = [1]  # the second attempt's tool call stops the process
    with pytest.raises(KeyboardInterrupt):
        retrying_graph.RetryingGraph.ask("Find transfer 481", run_id="retrying-stopped")

    resumed = lg_core.resume("retrying-stopped")

    assert resumed.completed, resumed.error
    step = resumed.result.trajectory.find("lookup")
    assert [attempt.status for attempt in step.attempts] == ["failed", "completed"]
    stopped, again = retrying_graph.CALLS
    assert stopped == again  # the second attempt's child went on under its own key
    store = config.runtime().store
    key = node_record(config, resumed, "lookup")["key"]
    assert store.load_run(attempt_child_id(resumed.id, key, 2)).status == "completed"
    with pytest.raises(RunNotFoundError):
        store.load_run(attempt_child_id(resumed.id, key, 3))


def test_a_swarm_member_retries_a_listed_failure_and_records_its_attempts(config, script):
    calls, reply = failing_first({"error": "provider down"}, {"text": "You were charged once."})
    triage = agent("TriageAgent", script(reply))

    class RetryingSwarm(Swarm):
        members = [member(triage, retries=1, retry_on=ProviderError)]
        start = triage

    run = RetryingSwarm.ask("Why was I charged twice?")

    assert run.completed, run.error
    assert run.result.text == "You were charged once."
    step = run.result.trajectory.find("triage")
    assert [attempt.status for attempt in step.attempts] == ["failed", "completed"]
    assert len(calls) == 2


def test_a_swarm_member_over_its_timeout_fails_the_run_with_an_assembly_step_timeout_error(config, script):
    triage = agent("TriageAgent", script([{"text": "too late", "delay": 3}]))

    class ImpatientSwarm(Swarm):
        members = [member(triage, timeout=0.3)]
        start = triage

    run = ImpatientSwarm.ask("Why was I charged twice?")

    assert run.failed
    assert isinstance(run.error, AssemblyStepTimeoutError), run.error
    assert "swarm member triage" in str(run.error)


def test_a_nodes_retry_starts_no_sooner_than_its_retry_delay_after_the_failed_attempt_ended(config, script):
    calls, reply = failing_first({"error": "provider down"}, {"text": "looked up"})
    lookup = agent("LookupAgent", script(reply))

    run = one_node_graph(node(lookup, retries=1, retry_on=ProviderError, retry_delay=0.4)).ask("Find transfer 481")

    assert run.completed, run.error
    first, second = run.result.trajectory.find("lookup").attempts
    assert [first.status, second.status] == ["failed", "completed"]
    assert (second.started_at - first.finished_at).total_seconds() >= 0.4
    assert (second.started_at - first.started_at).total_seconds() >= 0.4
    assert len(calls) == 2


def test_a_members_retry_waits_out_its_retry_delay(config, script):
    calls, reply = failing_first({"error": "provider down"}, {"text": "refund issued"})
    triage = agent("TriageAgent", script(reply))

    class PatientSwarm(Swarm):
        members = [member(triage, retries=1, retry_on=ProviderError, retry_delay=0.3)]
        start = triage

    run = PatientSwarm.ask("Why was I charged twice?")

    assert run.completed, run.error
    first, second = run.result.trajectory.steps[0].attempts
    assert (second.started_at - first.finished_at).total_seconds() >= 0.3
    assert len(calls) == 2


def test_cancelling_a_graph_run_during_a_retry_delay_ends_it_cancelled_without_waiting_the_delay_out(config, script):
    token = lg_core.CancellationToken()
    calls: list[int] = []

    def reply(request):
        calls.append(1)
        threading.Timer(0.3, token.cancel).start()  # fires while the node waits out its 60 s delay
        return {"error": "provider down"}

    lookup = agent("LookupAgent", script(reply))
    graph = one_node_graph(node(lookup, retries=1, retry_on=ProviderError, retry_delay=60))
    began = time.monotonic()

    run = graph.ask("Find transfer 481", cancellation_token=token)

    assert run.cancelled, run.outcome
    assert time.monotonic() - began < 30  # far less than the delay: the cancel ended the wait
    assert len(calls) == 1  # the second attempt never started: the run's only child is the first attempt's
    assert [child.status for child in config.runtime().store.list_runs() if child.id != run.id] == ["failed"]


def _invoke_in_a_workflow(**policy):
    """Declare one Workflow call with ``policy`` (``invoke`` checks it where it is written)."""
    from lg_core import Workflow

    class Declaring(Workflow):
        def perform(self):
            return self.invoke(LookupForChecks, as_="lookup", **policy)

    return Declaring("x").perform()


LookupForChecks = type("LookupForChecks", (Agent,), {"model": "scripted:unused"})


@pytest.mark.parametrize(
    ("declare", "owner"),
    [
        (lambda **policy: node(LookupForChecks, **policy), r"node\('LookupForChecks'\)"),
        (lambda **policy: member(LookupForChecks, **policy), r"member\('LookupForChecks'\)"),
        (_invoke_in_a_workflow, r"Declaring\.invoke\(lookup\)"),
    ],
    ids=["graph node", "swarm member", "workflow call"],
)
@pytest.mark.parametrize(
    ("policy", "message"),
    [
        ({"timeout": -1}, r"timeout must be a positive number of seconds or None, got -1; give the seconds"),
        ({"timeout": "15"}, r"timeout must be a positive number of seconds"),
        ({"retries": -1}, r"retries must be an integer of 0 or more, got -1"),
        ({"retries": 2}, r"retries=2 needs retry_on, the exception classes that are safe to try again"),
        ({"retries": 1, "retry_on": "ProviderError"}, r"retry_on must be an exception class.*such as"),
        ({"retries": 1, "retry_on": [ProviderError()]}, r"retry_on must list exception classes.*not their names"),
        ({"retries": 1, "retry_on": [str]}, r"retry_on must list exception classes, got <class 'str'>"),
        ({"retry_on": [ProviderError]}, r"retry_on is given but retries is 0.*set retries above 0"),
        ({"retry_delay": -0.5}, r"retry_delay must be 0 or more seconds"),
    ],
)
def test_a_bad_policy_fails_where_it_is_declared_naming_its_owner_and_the_fix(declare, owner, policy, message):
    with pytest.raises(lg_core.ConfigurationError, match=owner + ".*" + message):
        declare(**policy)
