"""Sessions of assembly runs: a Graph, Swarm or Workflow asked with ``session_id`` records its turn
(the caller's message and the assembly's answer) as an Agent's run does, and the session's history
reaches the assembly's first participants; another actor is refused, and a run that does not complete
adds nothing."""

from __future__ import annotations

import pytest

from lg_core import Agent, Graph, Swarm, Workflow, edge
from lg_core.errors import SessionActorError


def agent(name: str, target: str) -> type[Agent]:
    return type(name, (Agent,), {"model": target})


def recall(request) -> dict[str, str]:
    """An answer naming every user message the model was given, so a test sees its history."""
    said = [m.text for m in request.messages if m.role == "user"]
    return {"text": "seen: " + " | ".join(said)}


def stored(config, session_id: str, actor_id: str | None = None) -> list[tuple[str, str]]:
    snapshot = config.runtime().session_store.load(session_id, actor_id=actor_id)
    return [] if snapshot is None else [(m.role, m.text) for m in snapshot.messages]


@pytest.fixture
def recall_graph(script):
    def build():
        class RecallGraph(Graph):
            nodes = {"answer": agent("RecallNode", script(recall))}
            start = "answer"
            finish = "answer"

        return RecallGraph

    return build


def test_a_graph_asked_twice_in_one_session_sees_its_first_turn_as_history(config, recall_graph):
    graph = recall_graph()
    first = graph.ask("My name is Ada.", session_id="conv-1", actor_id="user-1")
    second = graph.ask("What is my name?", session_id="conv-1", actor_id="user-1")

    assert first.completed and second.completed, (first.error, second.error)
    assert first.response == "seen: My name is Ada."
    assert second.response.startswith("seen: My name is Ada. | ")
    assert second.response.endswith("What is my name?")
    assert stored(config, "conv-1", "user-1") == [
        ("user", "My name is Ada."),
        ("assistant", first.response),
        ("user", "What is my name?"),
        ("assistant", second.response),
    ]
    assert second.session_actor_id == "user-1"


def test_another_actor_naming_a_graphs_session_is_refused_and_sees_nothing(config, recall_graph):
    graph = recall_graph()
    graph.ask("Acme's secret.", session_id="conv-1", actor_id="acme")
    other = graph.ask("Anything stored?", session_id="conv-1", actor_id="globex")

    assert other.failed and isinstance(other.error, SessionActorError)
    assert stored(config, "conv-1", "acme") == [("user", "Acme's secret."), ("assistant", "seen: Acme's secret.")]


def test_a_failed_graph_run_adds_no_turn_to_its_session(config, script, recall_graph):
    recall_graph().ask("Remember this.", session_id="conv-1")

    class BrokenGraph(Graph):
        nodes = {"answer": agent("BrokenNode", script([{"error": "provider down"}]))}
        start = "answer"
        finish = "answer"

    failed = BrokenGraph.ask("This is lost.", session_id="conv-1")

    assert failed.failed
    assert stored(config, "conv-1") == [("user", "Remember this."), ("assistant", "seen: Remember this.")]


def test_a_cancelled_graph_run_adds_no_turn_to_its_session(config, recall_graph):
    from lg_core.cancellation import CancellationToken

    token = CancellationToken()
    token.cancel("not now")
    run = recall_graph().ask("Never answered.", session_id="conv-1", cancellation_token=token)

    assert run.cancelled
    assert stored(config, "conv-1") == []


def test_a_swarm_members_first_turn_continues_the_sessions_conversation(config, script):
    desk = agent("RecallDesk", script(recall))

    class RecallSwarm(Swarm):
        members = [desk]
        start = desk

    first = RecallSwarm.ask("I ordered a lamp.", session_id="conv-1")
    second = RecallSwarm.ask("What did I order?", session_id="conv-1")

    assert first.completed and second.completed, (first.error, second.error)
    assert second.response.startswith("seen: I ordered a lamp. | ")
    assert [role for role, _text in stored(config, "conv-1")] == ["user", "assistant", "user", "assistant"]


def test_a_workflows_calls_get_the_sessions_history_as_the_workflows_history(config, script):
    recaller = agent("RecallStep", script(recall))

    class RecallWorkflow(Workflow):
        def perform(self):
            return self.invoke(recaller)

    first = RecallWorkflow.ask("Blue is my colour.", session_id="conv-1")
    second = RecallWorkflow.ask("Which colour?", session_id="conv-1")

    assert first.completed and second.completed, (first.error, second.error)
    assert second.response.startswith("seen: Blue is my colour. | ")
    assert stored(config, "conv-1")[-1] == ("assistant", second.response)


def test_an_assembly_still_refuses_a_model_override(config, recall_graph):
    from lg_core.errors import InvocationError

    with pytest.raises(InvocationError, match="does not accept model_override"):
        recall_graph().ask("Hi", model_override="scripted:any")


def test_a_graph_asked_again_while_its_session_is_busy_waits_and_then_sees_the_first_turn(config, script):
    import contextvars
    import threading
    import time

    started = threading.Event()

    def slow_recall(request):
        if not started.is_set():
            started.set()
            time.sleep(0.5)  # the second ask arrives while this turn still runs
        return recall(request)

    class SlowGraph(Graph):
        nodes = {"answer": agent("SlowRecall", script(slow_recall))}
        start = "answer"
        finish = "answer"

    results = {}
    context = contextvars.copy_context()  # the thread asks under this test's configuration
    first = threading.Thread(
        target=context.run, args=(lambda: results.setdefault("first", SlowGraph.ask("One.", session_id="conv-1")),)
    )
    first.start()
    assert started.wait(10)
    second = SlowGraph.ask("Two?", session_id="conv-1")
    first.join(10)

    assert results["first"].completed and second.completed, (results["first"].error, second.error)
    assert second.response == "seen: One. | Two?"
    assert [text for _role, text in stored(config, "conv-1")] == ["One.", "seen: One.", "Two?", "seen: One. | Two?"]


def test_only_the_graphs_start_node_is_given_the_sessions_history(config, script):
    class TwoNodeGraph(Graph):
        nodes = {"first": agent("FirstRecall", script(recall)), "second": agent("SecondRecall", script(recall))}
        start = "first"
        edges = [edge("first", "second")]
        finish = "second"

    TwoNodeGraph.ask("Earlier turn.", session_id="conv-1")
    run = TwoNodeGraph.ask("Now.", session_id="conv-1")

    assert run.completed, run.error
    first, second = run.result.trajectory
    assert first.output.startswith("seen: Earlier turn. | ")
    assert "Earlier turn." not in second.output.replace(first.output, ""), "a later node gets only its input"


def test_a_swarm_member_that_opts_in_gets_the_runs_history_on_a_later_turn(config, script):
    from lg_core import member

    handing = agent(
        "HandingDesk",
        script(
            lambda request: (
                {"text": "done"}
                if request.messages[-1].role == "tool"
                else {"tool_calls": [{"name": "handoff", "arguments": {"to": "recalling_desk", "message": "over"}}]}
            )
        ),
    )
    recalling = agent("RecallingDesk", script(recall))

    class HandoffSwarm(Swarm):
        members = [handing, member(recalling, history=True)]
        start = handing
        handoffs = {handing: [recalling]}

    HandoffSwarm.ask("Earlier turn.", session_id="conv-1")
    run = HandoffSwarm.ask("Now.", session_id="conv-1")

    assert run.completed, run.error
    assert run.response.startswith("seen: Earlier turn. | ")


def test_a_graphs_session_actor_is_derived_by_session_actor_as_an_agents_is(recall_graph):
    from lg_core import Configuration, with_configuration

    configuration = Configuration(session_actor=lambda invocation: invocation.context.get("tenant"))
    with with_configuration(configuration):
        graph = recall_graph()
        graph.ask("Hello from Ada.", session_id="conv-1", actor_id="user-1", context={"tenant": "acme"})
        second = graph.ask("Who spoke?", session_id="conv-1", actor_id="user-2", context={"tenant": "acme"})
        other = graph.ask("Anything?", session_id="conv-1", actor_id="user-1", context={"tenant": "globex"})

        assert second.completed and second.response == "seen: Hello from Ada. | Who spoke?"
        assert configuration.runtime().store.load_run(second.id).actor_id == "acme"
        assert other.failed and isinstance(other.error, SessionActorError)
        assert len(stored(configuration, "conv-1", "acme")) == 4
    configuration.close()
