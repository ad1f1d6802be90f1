"""Graph runs in local mode: each node a durable step running its assembly as a child run.

The scripted models answer each node; the assertions read the run's outcome, its
answer and its trajectory (steps, transitions, concurrency), and the child runs the
nodes left in the store.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from datetime import UTC, datetime, timedelta

import pytest

import lg_core
from lg_core import Agent, Graph, Workflow, edge, error_edge
from lg_core.assemblies._graph_frame import _RUN_SPECS, DEFINITION_AT_START, run_spec
from lg_core.errors import (
    AssemblyLimitError,
    AssemblyRoutingError,
    InvocationError,
    ProviderError,
    RunStateError,
)
from lg_core.providers import scripted
from lg_core.store import START_STEP
from tests.assemblies import resumable_graph, spec_examples


def agent(name: str, target: str) -> type[Agent]:
    return type(name, (Agent,), {"model": target})


def last_input(request) -> str:
    return request.messages[-1].text


@pytest.fixture
def support(script):
    """SupportFlowGraph's agents: triage answers ``route``, the others echo what they were given."""

    def build(route: str):
        triage = agent("TriageAgent", script([{"text": route}]))
        billing = agent("BillingAgent", script(lambda request: {"text": "billing saw: " + last_input(request)}))
        general = agent("GeneralAgent", script(lambda request: {"text": "general saw: " + last_input(request)}))
        respond = agent("RespondAgent", script(lambda request: {"text": "answer from: " + last_input(request)}))

        class SupportFlowGraph(Graph):
            nodes = {"triage": triage, "billing": billing, "general": general, "respond": respond}
            start = "triage"
            edges = [
                edge("triage", "billing", when=lambda state: state.result("triage").output == "billing"),
                edge("triage", "general"),
                edge("billing", "respond"),
                edge("general", "respond"),
            ]
            finish = "respond"

        return SupportFlowGraph

    return build


def test_a_conditional_route_is_taken_and_the_finish_node_answers(config, support):
    run = support("billing").ask("Why was I charged twice?")

    assert run.completed, run.error
    trajectory = run.result.trajectory
    assert [step.participant for step in trajectory] == ["triage", "billing", "respond"]
    assert trajectory.transitions() == [("triage-1", "billing-2"), ("billing-2", "respond-3")]
    assert run.result.text.startswith("answer from: ")
    assert "From billing:\nbilling saw: " in run.result.text
    assert "Original Task:\nWhy was I charged twice?" in trajectory.find("billing").output


def test_the_unconditional_fallback_is_taken_when_no_condition_matches(config, support):
    run = support("something else").ask("Hello")

    assert run.completed, run.error
    assert [step.participant for step in run.result.trajectory] == ["triage", "general", "respond"]


def test_each_node_runs_as_a_child_run_stored_under_an_id_derived_from_its_step(config, support):
    run = support("billing").ask("Why was I charged twice?")

    store = config.runtime().store
    children = [store.load_run(step.attempts and _child_of(store, run.id, step.id)) for step in run.result.trajectory]
    assert [child.status for child in children] == ["completed"] * 3
    assert len({child.id for child in children}) == 3


def _child_of(store, run_id: str, step_id: str) -> str:
    frame = store.load_frame(f"{run_id}/root")
    return next(item["child_run_id"] for item in frame.checkpoint["data"]["done"] if item["id"] == step_id)


def test_two_matching_conditions_end_the_run_with_a_routing_error(config, script):
    opener = agent("StartAgent", script([{"text": "x"}]))
    other = agent("OtherAgent", script(lambda request: {"text": "y"}))

    class AmbiguousGraph(Graph):
        nodes = {"start": opener, "left": other, "right": other, "end": other}
        start = "start"
        edges = [
            edge("start", "left", when=lambda state: True),
            edge("start", "right", when=lambda state: True),
            edge("start", "end"),
            edge("left", "end"),
            edge("right", "end"),
        ]
        finish = "end"

    run = AmbiguousGraph.ask("Go")

    assert run.failed
    assert isinstance(run.error, AssemblyRoutingError)
    assert "more than one conditional route matched" in str(run.error)


def test_an_error_edge_sends_a_failed_node_to_its_recovery_node(config, script):
    flaky = agent("FlakyAgent", script([{"error": "provider down"}]))
    recovery = agent("RecoveryAgent", script(lambda request: {"text": "recovered: " + last_input(request)}))

    class RecoveringGraph(Graph):
        nodes = {"research": flaky, "recover": recovery}
        start = "research"
        edges = [error_edge("research", "recover", on=ProviderError), edge("research", "recover")]
        finish = "recover"

    run = RecoveringGraph.ask("Find it")

    assert run.completed, run.error
    steps = run.result.trajectory.steps
    assert [(step.participant, step.status) for step in steps] == [("research", "failed"), ("recover", "completed")]
    assert "provider down" in steps[0].attempts[0].error
    assert "Node research failed:" in run.result.text


def test_a_node_failure_no_error_edge_routes_fails_the_run(config, script):
    flaky = agent("FlakyAgent", script([{"error": "provider down"}]))
    after = agent("AfterAgent", script([{"text": "never"}]))

    class FragileGraph(Graph):
        nodes = {"research": flaky, "respond": after}
        start = "research"
        edges = [edge("research", "respond")]
        finish = "respond"

    run = FragileGraph.ask("Find it")

    assert run.failed
    assert "graph node research" in str(run.error)
    assert "provider down" in str(run.error)


def _investigation(script, barrier: threading.Barrier | None, max_concurrency: int = 8):
    triage = agent("TriageAgent", script([{"text": "transfer 481"}]))

    def branch(answer: str):
        def reply(request):
            if barrier is not None:
                barrier.wait()  # both branches must be running at once to pass this
            return {"text": answer}

        return reply

    ledger = agent("LedgerResearchAgent", script(branch("The ledger entry is awaiting settlement.")))
    policy = agent("PolicyResearchAgent", script(branch("Pending transfers settle within two days.")))
    respond = agent("RespondAgent", script(lambda request: {"text": last_input(request)}))

    class InvestigationGraph(Graph):
        nodes = {"triage": triage, "ledger": ledger, "policy": policy, "respond": respond}
        start = "triage"
        edges = [
            edge("triage", "ledger"),
            edge("triage", "policy"),
            edge("ledger", "respond"),
            edge("policy", "respond"),
        ]
        finish = "respond"

    InvestigationGraph.max_concurrency = max_concurrency
    InvestigationGraph._definition = InvestigationGraph._read_definition()
    return InvestigationGraph


def test_parallel_branches_run_at_once_and_the_join_gets_both_results(config, script):
    barrier = threading.Barrier(2, timeout=20)
    run = _investigation(script, barrier).ask("Why is transfer 481 pending?")

    assert run.completed, run.error
    trajectory = run.result.trajectory
    ledger, policy, respond = trajectory.find("ledger"), trajectory.find("policy"), trajectory.find("respond")
    assert trajectory.concurrent(ledger, policy)
    assert set(respond.predecessor_ids) == {ledger.id, policy.id}
    assert [step.participant for step in trajectory].count("respond") == 1
    assert run.result.text == (
        "Original Task:\nWhy is transfer 481 pending?\n\nInputs from previous nodes:\n\n"
        "From ledger:\nThe ledger entry is awaiting settlement.\n\n"
        "From policy:\nPending transfers settle within two days."
    )


def test_max_concurrency_one_runs_the_branches_one_after_another(config, script):
    run = _investigation(script, None, max_concurrency=1).ask("Why is transfer 481 pending?")

    assert run.completed, run.error
    trajectory = run.result.trajectory
    assert not trajectory.concurrent(trajectory.find("ledger"), trajectory.find("policy"))
    assert trajectory.find("respond") is not None


def test_max_steps_ends_a_looping_graph_with_an_assembly_limit_error(config, script):
    looping = agent("LoopAgent", script(lambda request: {"text": "again"}))

    class LoopGraph(Graph):
        nodes = {"draft": looping, "review": looping, "publish": looping}
        start = "draft"
        edges = [
            edge("draft", "review"),
            edge("review", "draft", when=lambda state: state.result("review").output == "again"),
            edge("review", "publish"),
        ]
        finish = "publish"
        max_steps = 5

    run = LoopGraph.ask("Write")

    assert run.failed
    assert isinstance(run.error, AssemblyLimitError)
    assert "max_steps (5)" in str(run.error)


def test_input_mappers_on_edges_and_nodes_read_a_frozen_state(config, script):
    seen: list = []
    first = agent("FirstAgent", script([{"text": "secret 42"}]))

    def echo(request):
        return {"text": "got " + last_input(request)}

    second = agent("SecondAgent", script(echo))

    def mapper(state):
        seen.append(state)
        with pytest.raises(TypeError):
            state.results["first"] = None  # read-only
        return {"redacted": state.result("first").output.split()[0]}

    class MappedGraph(Graph):
        nodes = {"first": first, "second": second}
        start = "first"
        edges = [edge("first", "second", input=mapper)]
        finish = "second"

    run = MappedGraph.ask("Go")

    assert run.completed, run.error
    assert run.result.text == 'got {"redacted": "secret"}'
    assert seen[0].current == "second"


def test_a_node_may_itself_be_a_graph(config, support, script):
    inner = support("billing")
    outer_first = agent("IntakeAgent", script([{"text": "charged twice"}]))

    class OuterGraph(Graph):
        nodes = {"intake": outer_first, "support": inner}
        start = "intake"
        edges = [edge("intake", "support")]
        finish = "support"

    run = OuterGraph.ask("Help")

    assert run.completed, run.error
    step = run.result.trajectory.find("support")
    assert step.assembly_kind == "graph"
    assert run.result.text.startswith("answer from: ")


def test_stream_ask_ask_async_and_start_execution_run_a_graph_like_an_agent(config, support):
    graph = support("billing")
    events = list(stream := graph.stream_ask("Why?"))
    assert events[0].type == "invocation_start"
    assert events[-1].type == "run_stop"
    assert stream.completed

    run = asyncio.run(graph.ask_async("Why?"))
    assert run.completed, run.error
    assert len(run.result.trajectory) == 3

    async def consume():
        stream = graph.stream_ask_async("Why?")
        return stream, [event.type async for event in stream]

    stream, types = asyncio.run(consume())
    assert types[0] == "invocation_start" and types[-1] == "run_stop"
    assert stream.run.completed

    execution = graph.start_execution("Why?")
    finished = execution.wait(timeout=30)
    assert finished.completed, finished.error
    assert [step.participant for step in finished.result.trajectory] == ["triage", "billing", "respond"]


@pytest.fixture
def guide_models():
    """The guide's example Agents' scripted models, under the names spec_examples declares."""
    names = {
        "triage": lambda request: {"text": "billing"},
        "billing": lambda request: {"text": "You were charged twice; a refund is on its way."},
        "ledger": lambda request: {"text": "The ledger entry is awaiting settlement."},
        "policy": lambda request: {"text": "Pending transfers settle within two business days."},
        "support": lambda request: {"text": "answer: " + last_input(request)},
    }
    for name, reply in names.items():
        scripted.register(name, reply)
    yield
    for name in names:
        scripted.unregister(name)


def test_the_guides_support_flow_graph_answers_and_reads_back_with_its_trajectory(config, guide_models):
    run = spec_examples.SupportFlowGraph.ask("Why was I charged twice?")

    assert run.completed, run.error
    assert [step.participant for step in run.result.trajectory] == ["triage", "billing", "respond"]
    again = config.runtime().get_run(run.id)
    assert again.result.trajectory.transitions() == run.result.trajectory.transitions()
    assert again.result.text == run.result.text


def test_the_guides_declared_join_feeds_the_join_through_its_fan_in_mapper(config, guide_models):
    run = spec_examples.DeclaredJoinGraph.ask("Why is transfer 481 pending?")

    assert run.completed, run.error
    assert json.loads(run.result.text.removeprefix("answer: ")) == {
        "ledger": "The ledger entry is awaiting settlement.",
        "policy": "Pending transfers settle within two business days.",
    }
    assert run.result.trajectory.find("ledger").output == "The ledger entry is awaiting settlement."


def test_what_a_graph_run_does_not_support_yet_is_refused(config, support):
    graph = support("billing")
    with pytest.raises(InvocationError, match="model_override"):
        graph.ask("Why?", model_override="scripted:other")

    class PlainWorkflow(Workflow):
        def perform(self):
            return None

    run = PlainWorkflow.ask("Hi")  # a Workflow runs; one returning no final invocation fails as a protocol error
    assert run.failed and type(run.error).__name__ == "ProtocolError"


def test_a_fork_of_a_graph_run_is_refused_and_its_retry_needs_an_importable_class(config, script):
    flaky = agent("FlakyAgent", script([{"error": "provider down"}]))

    class FailingGraph(Graph):
        nodes = {"only": flaky}
        start = "only"
        finish = "only"

    run = FailingGraph.ask("Go")
    assert run.failed

    with pytest.raises(RunStateError, match="cannot import the run's entrypoint"):
        lg_core.retry(run.id)  # a class defined in a function: no process could rebuild the run
    with pytest.raises(InvocationError, match="graph run, which cannot be forked"):
        lg_core.fork(run.id, from_step="root/node-1/only")


def test_cancelling_a_graph_run_cancels_the_node_running_and_ends_the_run_cancelled(config, script):
    slow = agent("SlowAgent", script([{"text": "late", "delay": 30}]))

    class SlowGraph(Graph):
        nodes = {"slow": slow}
        start = "slow"
        finish = "slow"

    run = SlowGraph.stream_ask("Go")
    events = iter(run)
    assert next(events).type == "invocation_start"
    timer = threading.Timer(0.3, run.cancel)
    timer.start()
    rest = list(events)
    timer.join()

    assert run.cancelled
    assert rest[-1].type == "run_cancel"
    store = config.runtime().store
    [node_step] = [step for step in store.load_steps(run.id) if step.kind == "graph_node"]
    child = store.load_run(node_step.key and _child_id(run.id, node_step.key))
    assert child.status == "cancelled"


def _child_id(run_id: str, key: str) -> str:
    from lg_core.assemblies.child_runs import child_run_id

    return child_run_id(run_id, key)


def test_a_graph_deadline_reaches_its_node_and_ends_the_run_partial(config, script):
    slow = agent("SlowAgent", script([{"text": "late", "delay": 30}]))

    class SlowGraph(Graph):
        nodes = {"slow": slow}
        start = "slow"
        finish = "slow"

    started = time.monotonic()
    run = SlowGraph.ask("Go", deadline_at=datetime.now(UTC) + timedelta(seconds=0.5))

    assert run.partial
    assert time.monotonic() - started < 10


def test_a_graph_run_stores_its_definition_and_its_nodes_route_by_it(config, guide_models):
    run = spec_examples.InvestigationGraph.ask("Why is transfer 481 pending?")

    assert run.completed, run.error
    store = config.runtime().store
    start = store.load_step(run.id, START_STEP)
    assert start.checkpoint["data"]["definition"] == spec_examples.InvestigationGraph.definition().to_dict()
    # Later checkpoints point at the first one instead of carrying the definition at every node.
    assert store.load_frame(f"{run.id}/root").checkpoint["data"]["definition"] == DEFINITION_AT_START


def test_a_node_step_reads_the_definition_its_run_started_with_not_the_class_as_it_is_now(config):
    stored = spec_examples.InvestigationGraph.definition().to_dict()
    store = config.runtime().store

    spec = run_spec("run-started-earlier", stored, spec_examples.SupportFlowGraph, store)

    assert [item.name for item in spec.nodes] == ["triage", "ledger", "policy", "respond"]
    assert run_spec("run-started-earlier", None, spec_examples.SupportFlowGraph, store) is spec  # read once per run


def test_a_node_step_after_the_first_reads_the_definition_from_the_runs_start_step(config, guide_models):
    run = spec_examples.InvestigationGraph.ask("Why is transfer 481 pending?")
    assert run.completed, run.error
    _RUN_SPECS.pop(run.id, None)  # as in a worker process that meets the run for the first time

    spec = run_spec(run.id, DEFINITION_AT_START, spec_examples.SupportFlowGraph, config.runtime().store)

    assert [item.name for item in spec.nodes] == ["triage", "ledger", "policy", "respond"]
    with pytest.raises(RunStateError, match="lost the definition"):
        run_spec("no-such-run", DEFINITION_AT_START, spec_examples.SupportFlowGraph, config.runtime().store)


def test_a_graph_run_stopped_mid_node_resumes_without_running_a_committed_node_again(file_config):
    resumable_graph.CALLS.clear()
    resumable_graph.INTERRUPT_AT[:] = [2]  # the second node's tool call stops the process
    with pytest.raises(KeyboardInterrupt):
        resumable_graph.ResumableGraph.ask("Go", run_id="graph-stopped")
    assert len(resumable_graph.CALLS) == 2

    resumed = lg_core.resume("graph-stopped")

    assert resumed.completed, resumed.error
    assert [step.participant for step in resumed.result.trajectory] == ["first", "second"]
    first, second, again = resumable_graph.CALLS
    assert second == again != first  # the second node's child went on under its own key; the first never re-ran
