"""Tool-loop detection (the spec's Agent::ToolLoop and ToolLoopError).

Identical calls (same tool, same normalized arguments) that keep returning the
same result warn the model at ``warning_at``, give the final warning at
``terminate_at - 1`` and stop the run with ToolLoopError at ``terminate_at``,
before the tool body runs again. The counts are part of the checkpoint.
"""

from __future__ import annotations

import threading

import pytest

import lg_core
from lg_core import Agent, Configuration, Tool, after_initialize, with_configuration
from lg_core.content import ToolResult
from lg_core.errors import ConfigurationError, ProtocolError, ToolLoopError
from lg_core.tool_loops import DEFAULT_TERMINATE_AT, MAX_TRACKED_SIGNATURES, call_signature, observe


class CountingLookupTool(Tool):
    """Answers every topic with the same entry (unless the input asks for a numbered one)."""

    tool_name = "lookup"
    description = "Look up a help center entry."
    input_schema = {
        "type": "object",
        "properties": {"topic": {"type": "string"}, "a": {"type": "integer"}, "b": {"type": "integer"}},
    }
    calls: list[dict] = []
    answers: list[str] = []  # consumed in order when not empty

    def call(self, input):
        CountingLookupTool.calls.append(dict(input))
        return CountingLookupTool.answers.pop(0) if CountingLookupTool.answers else "No entry."


class OtherTool(Tool):
    tool_name = "refresh"
    description = "Refresh the account."

    def call(self, input):
        return "refreshed"


class ToolLessLoopAgent(Agent):
    """Detects loops and takes its model from the invocation; a subclass picks its tools
    (they are cumulative, so a subclass of LoopAgent would keep LoopAgent's lookup)."""

    detect_tool_loops = True

    @classmethod
    def select_model(cls, invocation):
        return invocation["target"]


class LoopAgent(ToolLessLoopAgent):
    """Module level, so a stored run can be resumed by its import path."""

    tools = [CountingLookupTool, OtherTool]


@pytest.fixture(autouse=True)
def fresh_tool():
    CountingLookupTool.calls, CountingLookupTool.answers = [], []


def lookup(call_id, name="lookup", **arguments):
    return {"name": name, "id": call_id, "arguments": arguments or {"topic": "refunds"}}


def model_seeing_results(turns, seen):
    """A scripted model function playing ``turns`` and keeping each tool message's result texts."""

    def model(request):
        last = request.messages[-1]
        if last.role == "tool":
            seen.append(
                [
                    "\n".join(part.text for part in block.content)
                    for block in last.content
                    if isinstance(block, ToolResult)
                ]
            )
        return turns[len(seen)] if last.role == "tool" else turns[0]

    return model


def repeated(count, final="Done."):
    return [{"tool_calls": [lookup(f"c{i}")]} for i in range(count)] + [{"text": final}]


def test_repeats_warn_then_the_terminating_repeat_stops_the_run_before_the_tool_runs(config, script):
    seen: list[list[str]] = []
    run = LoopAgent.ask("Refunds?", target=script(model_seeing_results(repeated(6), seen)))

    assert run.failed and isinstance(run.error, ToolLoopError) and isinstance(run.error, ProtocolError)
    assert "same arguments 5 times" in str(run.error)
    assert len(CountingLookupTool.calls) == 4  # the fifth identical call never ran
    assert seen[0] == ["No entry."] and seen[1] == ["No entry."]
    assert seen[2][0].startswith("No entry.\nWarning:") and "3 times" in seen[2][0]
    assert seen[3][0].startswith("No entry.\nFinal warning:") and "4 times" in seen[3][0]
    assert len(seen) == 4


def test_detection_is_off_until_declared(config, script):
    class PlainAgent(LoopAgent):
        detect_tool_loops = None

    seen: list[list[str]] = []
    run = PlainAgent.ask("Refunds?", target=script(model_seeing_results(repeated(6), seen)))

    assert run.completed and len(CountingLookupTool.calls) == 6
    assert all(texts == ["No entry."] for texts in seen)


def test_a_changed_result_starts_the_count_again(config, script):
    CountingLookupTool.answers = ["A", "A", "B", "B", "A", "A"]
    seen: list[list[str]] = []
    run = LoopAgent.ask("Refunds?", target=script(model_seeing_results(repeated(6), seen)))

    assert run.completed and len(CountingLookupTool.calls) == 6
    assert [texts[0] for texts in seen] == ["A", "A", "B", "B", "A", "A"]  # never three in a row


def test_arguments_are_compared_normalized_and_different_ones_count_apart(config, script):
    turns = [
        {"tool_calls": [lookup("c0", a=1, b=2)]},
        {"tool_calls": [lookup("c1", b=2, a=1)]},  # the same arguments in another order
        {"tool_calls": [lookup("c2", a=1, b=3)]},  # different arguments: a sequence of its own
        {"tool_calls": [lookup("c3", a=1, b=2)]},
        {"text": "Done."},
    ]
    seen: list[list[str]] = []
    run = LoopAgent.ask("Refunds?", target=script(model_seeing_results(turns, seen)))

    assert run.completed
    assert [texts[0] for texts in seen[:3]] == ["No entry.", "No entry.", "No entry."]
    assert seen[3][0].startswith("No entry.\nWarning:")  # the third {a: 1, b: 2} call


@pytest.mark.parametrize("excluded", [CountingLookupTool, "lookup", [CountingLookupTool()], ["refresh", "lookup"]])
def test_excluded_tools_never_count(config, script, excluded):
    class ExcludingAgent(LoopAgent):
        detect_tool_loops = {"warning_at": 2, "terminate_at": 3, "except": excluded}

    seen: list[list[str]] = []
    run = ExcludingAgent.ask("Refunds?", target=script(model_seeing_results(repeated(5), seen)))

    assert run.completed and len(CountingLookupTool.calls) == 5
    assert all(texts == ["No entry."] for texts in seen)


def test_custom_limits_and_other_tools_still_count(config, script):
    class StrictAgent(LoopAgent):
        detect_tool_loops = {"warning_at": 2, "terminate_at": 3, "except": [CountingLookupTool]}

    turns = [{"tool_calls": [lookup(f"r{i}", name="refresh")]} for i in range(4)] + [{"text": "Done."}]
    seen: list[list[str]] = []
    run = StrictAgent.ask("Refresh", target=script(model_seeing_results(turns, seen)))

    assert run.failed and isinstance(run.error, ToolLoopError)
    assert seen[0] == ["refreshed"] and seen[1][0].startswith("refreshed\nFinal warning:")
    assert len(seen) == 2


def test_identical_calls_of_one_parallel_batch_all_count(config, script):
    barrier = threading.Barrier(3, timeout=30)

    class TogetherTool(CountingLookupTool):
        tool_name = "lookup"

        def call(self, input):
            if "/tool/p" in self.context.metadata["step"]:
                barrier.wait()  # all three calls of the batch are running before any of them commits
            return super().call(input)

    class BatchAgent(ToolLessLoopAgent):
        tools = [TogetherTool]

    turns = [
        {"tool_calls": [lookup("p0"), lookup("p1"), lookup("p2")]},
        {"tool_calls": [lookup("s0")]},
        {"tool_calls": [lookup("s1")]},
        {"text": "Done."},
    ]
    seen: list[list[str]] = []
    run = BatchAgent.ask("Refunds?", target=script(model_seeing_results(turns, seen)))

    assert run.failed and isinstance(run.error, ToolLoopError)
    first_turn = seen[0]
    assert len(first_turn) == 3
    assert first_turn[:2] == ["No entry.", "No entry."]  # counts 1, 2 and 3, in call order
    assert first_turn[2].startswith("No entry.\nWarning:") and "3 times" in first_turn[2]
    assert seen[1][0].startswith("No entry.\nFinal warning:") and "4 times" in seen[1][0]
    assert len(TogetherTool.calls) == 4


@pytest.fixture
def wide_pool():
    """Enough tool threads for every call of the widest batch to be in flight at once."""
    configuration = Configuration(max_parallel_tools=16)
    with with_configuration(configuration):
        yield configuration
    configuration.close()


ALLOWED = DEFAULT_TERMINATE_AT - 1  # identical calls that may run before the terminating one


def run_identical_batch(script, size):
    """One turn of ``size`` identical calls p0..p<size-1>, all in flight together; returns (run, bodies run).

    Every call's step waits at a barrier before it decides, so none has committed
    when any decides. The calls the fix lets run (p0..p3) are all inside their
    bodies before the others decide, and stay there until the run has ended, so
    a sibling that stops the run can neither cut them short nor commit first.
    """
    started = threading.Barrier(size, timeout=30)
    allowed_in, ended, bodies = threading.Event(), threading.Event(), []

    class HeldTool(CountingLookupTool):
        tool_name = "lookup"

        def call(self, input):
            bodies.append(1)
            if len(bodies) >= ALLOWED:
                allowed_in.set()
            ended.wait(timeout=10)
            return "No entry."

    class BatchAgent(ToolLessLoopAgent):
        tools = [HeldTool]

        @after_initialize
        def decide_together(self, agent, **kwargs):
            step = str(kwargs["context"].metadata.get("step", ""))
            if "/tool/" in step:
                started.wait()
                if int(step.rsplit("/p", 1)[1]) >= ALLOWED:
                    allowed_in.wait(timeout=10)

    def on_event(event):
        if event.type in ("run_error", "run_stop"):
            ended.set()

    turns = [{"tool_calls": [lookup(f"p{i}") for i in range(size)]}, {"text": "Done."}]
    run = BatchAgent.ask("Refunds?", target=script(turns), on_event=on_event)
    return run, len(bodies)


@pytest.mark.parametrize("size", [6, 10])
def test_identical_calls_of_one_parallel_batch_stop_at_the_same_call_every_time(wide_pool, script, size):
    for _ in range(3):
        run, bodies = run_identical_batch(script, size)
        assert run.failed and isinstance(run.error, ToolLoopError), run.error
        assert bodies == ALLOWED, f"{bodies} of {size} identical parallel calls ran their tool body"


def test_loop_warnings_follow_call_order_not_commit_order(config, script):
    """The calls commit last to first; the third identical call still carries the warning."""
    committed = {name: threading.Event() for name in ("p1", "p2")}

    class ReversedTool(CountingLookupTool):
        tool_name = "lookup"

        def call(self, input):
            later = {"p0": "p1", "p1": "p2"}.get(self.context.metadata["step"].rsplit("/", 1)[1])
            if later is not None:
                assert committed[later].wait(timeout=10)
            return super().call(input)

    class BatchAgent(ToolLessLoopAgent):
        tools = [ReversedTool]

    def on_event(event):  # a durable event is published after its step's commit
        if event.type == "tool_execution_stop" and event.data["id"] in committed:
            committed[event.data["id"]].set()

    turns = [{"tool_calls": [lookup("p0"), lookup("p1"), lookup("p2")]}, {"text": "Done."}]
    seen: list[list[str]] = []
    run = BatchAgent.ask("Refunds?", target=script(model_seeing_results(turns, seen)), on_event=on_event)

    assert run.completed
    assert seen[0][:2] == ["No entry.", "No entry."]
    assert seen[0][2].startswith("No entry.\nWarning:") and "3 times" in seen[0][2]


def test_each_call_stores_its_identical_calls_before_it(script):
    """Counted when the turn is scheduled and kept on the step row: a retried or resumed
    step decides from it as the first attempt did, whichever siblings have committed."""
    configuration = Configuration(max_parallel_tools=1)
    turns = [{"tool_calls": [lookup("s0")]}, {"tool_calls": [lookup("s1")]}]
    turns += [
        {"tool_calls": [lookup("p0"), lookup("refresh", name="refresh"), lookup("p1"), lookup("p2")]},
        {"text": "Done."},
    ]
    with with_configuration(configuration):
        run = LoopAgent.ask("Refunds?", target=script(turns))
        steps = {step.key.rsplit("/", 1)[1]: step for step in configuration.runtime().store.load_steps(run.id)}
    configuration.close()

    assert run.failed and isinstance(run.error, ToolLoopError)
    assert [steps[key].input["loop_repeats"] for key in ("s0", "s1", "p0", "p1", "p2")] == [0, 1, 2, 3, 4]
    assert steps["refresh"].input["loop_repeats"] == 0  # another signature
    assert len(CountingLookupTool.calls) == ALLOWED


@pytest.mark.parametrize(
    ("declaration", "message"),
    [
        ({"warning_at": 1}, "warning_at >= 2"),
        ({"warning_at": 3, "terminate_at": 3}, "terminate_at > warning_at"),
        ({"warning_at": "3"}, "warning_at must be an integer"),
        ({"terminate_at": True}, "terminate_at must be an integer"),
        ({"warn_at": 3}, "unknown option 'warn_at'"),
        ({"except": [42]}, "tool classes, tool instances or tool names"),
        ("yes", "must be True, False or a mapping"),
    ],
)
def test_a_bad_declaration_is_a_configuration_error_at_class_definition(declaration, message):
    with pytest.raises(ConfigurationError, match=message):
        type("BadLoopAgent", (Agent,), {"detect_tool_loops": declaration})


def test_the_counts_are_in_the_checkpoint_and_survive_a_resume(tmp_path, script):
    """Two identical calls commit, the process "dies" in the next model turn, and the
    resumed run (a new runtime reading the file store) still warns on the third result."""
    store = f"sqlite:///{tmp_path / 'runs.db'}"
    turns, seen, crashed = repeated(6), [], []
    playing = model_seeing_results(turns, seen)

    def model(request):
        reply = playing(request)  # records the tool result this turn reads
        if len(seen) == 2 and not crashed:
            crashed.append(True)
            raise KeyboardInterrupt  # like a kill: this model turn commits nothing
        return reply

    first = Configuration(run_store=store)
    with with_configuration(first), pytest.raises(KeyboardInterrupt):
        LoopAgent.ask("Refunds?", target=script(model), run_id="loop-run")
    first.close()
    assert len(CountingLookupTool.calls) == 2

    second = Configuration(run_store=store)
    with with_configuration(second):
        run = lg_core.resume("loop-run", force=True)  # force: the "dead" holder is this very process
    second.close()

    assert run.failed and isinstance(run.error, ToolLoopError)
    assert len(CountingLookupTool.calls) == 4  # two before the crash, two after it
    assert seen[-2][0].startswith("No entry.\nWarning:") and seen[-1][0].startswith("No entry.\nFinal warning:")


def test_observe_keeps_the_newest_signatures_only():
    counts: dict = {}
    result = {"status": "success", "content": [{"kind": "text", "text": "same"}]}
    for index in range(MAX_TRACKED_SIGNATURES + 5):
        counts, count = observe(counts, "lookup", {"topic": str(index)}, result)
        assert count == 1
    assert len(counts) == MAX_TRACKED_SIGNATURES
    assert call_signature("lookup", {"topic": "0"}) not in counts
    counts, count = observe(counts, "lookup", {"topic": str(MAX_TRACKED_SIGNATURES + 4)}, result)
    assert count == 2
    assert next(reversed(counts)) == call_signature("lookup", {"topic": str(MAX_TRACKED_SIGNATURES + 4)})
