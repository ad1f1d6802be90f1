"""``agent_stream`` wrappers in local mode: every participant's events reach the assembly's caller
with their source (Agent, operation, enclosing assembly steps), before the ordinary events, frozen."""

from __future__ import annotations

import json

import pytest

from lg_core import Agent, Graph, Workflow, edge
from lg_core.agent_stream import AgentStreamSource, AgentStreamStep, decoded_wrapper
from lg_core.execution import event_json


def agent(name: str, target: str) -> type[Agent]:
    return type(name, (Agent,), {"model": target})


@pytest.fixture
def pipeline(script):
    """A Graph ``draft -> polish`` whose nodes answer with fixed text."""

    def build():
        draft = agent("DraftAgent", script([{"text": "a draft"}]))
        polish = agent("PolishAgent", script([{"text": "polished"}]))

        class PipelineGraph(Graph):
            nodes = {"draft": draft, "polish": polish}
            start = "draft"
            edges = [edge("draft", "polish")]
            finish = "polish"

        return PipelineGraph

    return build


def wrappers(events):
    return [event for event in events if event.type == "agent_stream"]


def test_a_graph_stream_wraps_every_node_agents_events_with_its_source(config, pipeline):
    graph = pipeline()
    stream = graph.stream_ask("Write")
    events = list(stream)

    assert stream.completed
    seen = wrappers(events)
    participants = [event.data["source"].assembly_path[-1].participant for event in seen]
    assert participants[0] == "draft" and participants[-1] == "polish"
    assert participants == sorted(participants, key=["draft", "polish"].index)  # one node's events, then the next
    first = seen[0]
    source = first.data["source"]
    assert isinstance(source, AgentStreamSource)
    assert source.agent_id == graph.definition().spec.nodes[0].assembly.agent_id
    assert source.agent_path == "/root"
    assert source.parent_operation_id == stream.id
    assert source.assembly_path == (
        AgentStreamStep(assembly_id=graph.assembly_id, assembly_kind="graph", participant="draft", step_id="draft-1"),
    )
    assert first.data["event"].type == "invocation_start"
    assert first.data["input"].text == "Write"  # the Message the node's Agent was asked
    stops = [event.data["event"] for event in seen if event.data["event"].type == "invocation_stop"]
    assert len(stops) == 2
    operations = {event.data["source"].operation_id for event in seen}
    assert len(operations) == 2 and stream.id not in operations  # each node's own child run
    assert not any(event.type.startswith("run_") for event in (w.data["event"] for w in seen))


def test_the_final_agents_wrapper_comes_before_the_ordinary_events_that_end_the_graph(config, pipeline):
    events = list(pipeline().stream_ask("Write"))
    last_wrapper = max(index for index, event in enumerate(events) if event.type == "agent_stream")
    terminal = next(index for index, event in enumerate(events) if event.type == "run_stop")
    assert last_wrapper < terminal


def test_a_workflows_final_call_streams_its_wrapper_before_the_forwarded_text(config, script):
    writer = agent("WriterAgent", script([{"text": "final words"}]))

    class WriteFlow(Workflow):
        def perform(self):
            return self.invoke(writer, as_="write")

    events = list(WriteFlow.stream_ask("Write"))
    delta = next(index for index, event in enumerate(events) if event.type == "text_delta")
    wrapped_delta = next(
        index
        for index, event in enumerate(events)
        if event.type == "agent_stream" and event.data["event"].type == "text_delta"
    )
    assert wrapped_delta < delta
    step = events[wrapped_delta].data["source"].assembly_path[0]
    assert (step.assembly_kind, step.participant) == ("workflow", "write")


def outer_graph(inner: type[Graph], script) -> type[Graph]:
    """A Graph whose second node, ``work``, is the Graph ``inner``."""
    intake = agent("IntakeAgent", script([{"text": "the request"}]))

    class OuterGraph(Graph):
        nodes = {"intake": intake, "work": inner}
        start = "intake"
        edges = [edge("intake", "work")]
        finish = "work"

    return OuterGraph


def test_a_graph_in_a_graph_gives_its_agents_a_two_step_assembly_path(config, pipeline, script):
    inner = pipeline()
    OuterGraph = outer_graph(inner, script)  # noqa: N806 - a class

    stream = OuterGraph.stream_ask("Help")
    seen = wrappers(list(stream))

    assert stream.completed, stream.error
    paths = {tuple(step.participant for step in event.data["source"].assembly_path) for event in seen}
    assert paths == {("intake",), ("work", "draft"), ("work", "polish")}
    nested = next(event.data["source"] for event in seen if len(event.data["source"].assembly_path) == 2)
    assert [step.assembly_kind for step in nested.assembly_path] == ["graph", "graph"]
    assert nested.assembly_path[0].assembly_id == OuterGraph.assembly_id
    assert nested.assembly_path[1].assembly_id == inner.assembly_id
    assert nested.parent_operation_id not in (None, stream.id)  # the inner Graph's run invoked it


def test_include_agent_events_false_drops_the_wrappers(config, pipeline):
    stream = pipeline().stream_ask("Write", include_agent_events=False)
    events = list(stream)
    assert stream.completed
    assert wrappers(events) == []
    assert stream.include_agent_events is False


def test_a_graph_includes_agent_events_by_default_and_an_agent_does_not(config, pipeline, script):
    assert pipeline().stream_ask("Write").include_agent_events is True
    solo = agent("SoloAgent", script([{"text": "hi"}]))
    events = list(solo.stream_ask("Hello"))
    assert wrappers(events) == []


def test_a_standalone_agent_with_include_agent_events_gets_wrappers_with_an_empty_path(config, script):
    solo = agent("SoloAgent", script([{"text": "hi"}]))
    stream = solo.stream_ask("Hello", include_agent_events=True)
    events = list(stream)

    assert stream.completed and stream.include_agent_events
    seen = wrappers(events)
    assert seen and all(event.data["source"].assembly_path == () for event in seen)
    assert seen[0].data["source"].operation_id == stream.id
    assert seen[0].data["source"].agent_id == solo.agent_id
    assert seen[0].data["input"].text == "Hello"
    start = events.index(seen[0])
    assert events[start + 1].type == "invocation_start"  # the wrapper, then the ordinary event


def test_wrapped_events_and_inputs_are_frozen(config, pipeline):
    seen = wrappers(list(pipeline().stream_ask("Write")))
    inner = seen[0].data["event"]
    with pytest.raises(TypeError):
        inner.data["extra"] = 1  # type: ignore[index]
    with pytest.raises(TypeError):
        seen[0].data["source"].assembly_path[0] = None  # type: ignore[index]
    with pytest.raises(AttributeError):
        seen[0].data["source"].agent_id = "other"  # type: ignore[misc]


def test_a_wrapper_encodes_to_json_and_reads_back_as_it_was(config, pipeline):
    """What another process's stream (and an SSE line) carries of a wrapper."""
    seen = wrappers(list(pipeline().stream_ask("Write")))
    for wrapper in seen:
        encoded = json.loads(json.dumps(event_json(wrapper)))
        decoded = decoded_wrapper(encoded)
        assert decoded["source"] == wrapper.data["source"]
        assert decoded["event"].type == wrapper.data["event"].type
        assert decoded["event"].seq == wrapper.data["event"].seq
    stop = next(wrapper for wrapper in seen if wrapper.data["event"].type == "invocation_stop")
    assert dict(decoded_wrapper(event_json(stop))["event"].data).keys() == dict(stop.data["event"].data).keys()


def test_the_event_consumer_of_start_execution_gets_the_wrappers_by_default(config, pipeline):
    seen = []
    execution = pipeline().start_execution("Write", on_event=seen.append)

    assert execution.wait(timeout=30).completed
    participants = {event.data["source"].assembly_path[-1].participant for event in wrappers(seen)}
    assert participants == {"draft", "polish"}


def test_an_unobserved_graph_makes_no_wrappers_and_an_observed_one_does(config, pipeline, monkeypatch):
    """Wrappers are live-only: a run asked without a consumer reads none, so none is built."""
    import lg_core.agent_stream as agent_stream

    built = []
    original = agent_stream.wrapped

    def counting(*args, **kwargs):
        built.append(args[0].type)
        return original(*args, **kwargs)

    monkeypatch.setattr(agent_stream, "wrapped", counting)
    graph = pipeline()

    assert graph.ask("Write").completed
    assert built == []

    seen = []
    assert graph.ask("Write", on_event=seen.append).completed
    assert built and len(wrappers(seen)) == len(built)


def test_a_nested_graph_builds_wrappers_for_the_observed_run_enclosing_it(config, pipeline, script):
    """The inner Graph's own run has no consumer; its caller's link leads to the observed outer run."""
    seen = []
    assert outer_graph(pipeline(), script).ask("Help", on_event=seen.append).completed
    paths = {tuple(step.participant for step in event.data["source"].assembly_path) for event in wrappers(seen)}
    assert paths == {("intake",), ("work", "draft"), ("work", "polish")}
