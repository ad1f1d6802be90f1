"""Tools inside real runs: parallelism, exclusivity, the run-scoped binding and state.

Concurrency is proven with barriers and events, never with timings: a
``threading.Barrier(2)`` only opens when two tool calls are inside it at the
same moment, so sequential execution breaks it and the test fails.
"""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

import lg_core
from lg_core import (
    Agent,
    Run,
    RunContext,
    Tool,
    Usage,
    after_invocation,
    before_invocation,
    before_model,
)
from lg_core.errors import ConfigurationError
from lg_core.providers import scripted
from tests.support.recording import recording


def agent_for(target, *tool_classes, **attributes):
    namespace = {"model": target, "tools": list(tool_classes), **attributes}
    return type("ToolAgent", (Agent,), namespace)


def call(name, call_id=None, **arguments):
    data = {"name": name, "arguments": arguments}
    if call_id is not None:
        data["id"] = call_id
    return data


def results_of(run, index=2):
    message = run.result.messages[index]
    assert message.role == "tool"
    return message.tool_results


def offered_tools(requests, index=0):
    return sorted(spec.name for spec in requests[index].tools)


def recording_script(script, turns):
    """A scripted target that also records every ModelRequest it serves."""
    requests = []

    def serve(request):
        requests.append(request)
        return turns[request.metadata["sequence"]]

    return script(serve), requests


# -- parallel and exclusive ---------------------------------------------------------------


def test_two_tool_calls_of_one_turn_run_in_parallel_and_results_keep_call_order(config, script):
    barrier = threading.Barrier(2, timeout=30)
    second_finished = threading.Event()
    finish_order = []

    class SlowTool(Tool):
        tool_name = "slow"
        description = "Finishes after the fast one."

        def call(self, input):
            barrier.wait()
            assert second_finished.wait(30)
            finish_order.append("slow")
            return "slow result"

    class FastTool(Tool):
        tool_name = "fast"
        description = "Finishes first."

        def call(self, input):
            barrier.wait()
            finish_order.append("fast")
            second_finished.set()
            return "fast result"

    target = script([{"tool_calls": [call("slow"), call("fast")]}, {"text": "Both done."}])
    run = agent_for(target, SlowTool, FastTool).ask("Do both")

    assert run.outcome == "completed"
    assert finish_order == ["fast", "slow"]
    results = results_of(run)
    assert [r.text for r in results] == ["slow result", "fast result"], "results follow call order, not finish order"
    assert [r.status for r in results] == ["success", "success"]
    assert [r.tool_use_id for r in results] == [u.id for u in run.result.messages[1].tool_uses]
    assert run.tool_errors == []


def test_call_ids_holding_a_slash_still_fan_in_with_every_result(config, script):
    """Call ids are the provider's: a "/" in one must not hide the turn's other results.

    The fan-in read the siblings' results under the step key less its last
    "/"-part, so the last call to commit, with id "b/2", looked under
    ``.../tool/b/`` and the run failed with KeyError('a/1').
    """

    class EchoTool(Tool):
        tool_name = "echo"
        description = "Echo n."

        def call(self, input):
            return f"echo {input['n']}"

    target = script([{"tool_calls": [call("echo", "a/1", n=1), call("echo", "b/2", n=2)]}, {"text": "ok"}])
    run = agent_for(target, EchoTool).ask("Go")

    assert run.outcome == "completed", run.error
    assert [(r.tool_use_id, r.text) for r in results_of(run)] == [("a/1", "echo 1"), ("b/2", "echo 2")]


def _exclusive_tracker():
    lock = threading.Lock()
    state = {"active": 0, "max": 0, "entries": []}

    class ExclusiveTool(Tool):
        tool_name = "update_draft"
        description = "Update the shared draft."
        exclusive = True
        input_schema = {
            "type": "object",
            "properties": {"section": {"type": "string"}},
            "required": ["section"],
            "additionalProperties": False,
        }

        def call(self, input):
            with lock:
                state["active"] += 1
                state["max"] = max(state["max"], state["active"])
                state["entries"].append(input["section"])
            time.sleep(0.05)  # widen the window an overlap would need; nothing asserts on time
            with lock:
                state["active"] -= 1
            return f"updated {input['section']}"

    return ExclusiveTool, state


def test_exclusive_tools_never_overlap_yet_all_run(config, script):
    ExclusiveTool, state = _exclusive_tracker()
    sections = ["intro", "body", "summary", "appendix"]
    target = script(
        [
            {"tool_calls": [call("update_draft", f"c{i}", section=s) for i, s in enumerate(sections)]},
            {"text": "Draft updated."},
        ]
    )
    run = agent_for(target, ExclusiveTool).ask("Update every section")

    assert run.outcome == "completed"
    assert state["max"] == 1
    assert sorted(state["entries"]) == sorted(sections)
    assert [r.text for r in results_of(run)] == [f"updated {s}" for s in sections]


def test_an_exclusive_tool_may_overlap_a_non_exclusive_one(config, script):
    barrier = threading.Barrier(2, timeout=30)

    class LockedTool(Tool):
        tool_name = "locked"
        description = "Exclusive."
        exclusive = True

        def call(self, input):
            barrier.wait()
            return "locked ok"

    class FreeTool(Tool):
        tool_name = "free"
        description = "Not exclusive."

        def call(self, input):
            barrier.wait()
            return "free ok"

    target = script([{"tool_calls": [call("locked"), call("free")]}, {"text": "ok"}])
    run = agent_for(target, LockedTool, FreeTool).ask("Go")

    assert run.outcome == "completed"
    assert [r.text for r in results_of(run)] == ["locked ok", "free ok"]


# -- the binding ---------------------------------------------------------------------------------


def test_tool_binding_exposes_run_agent_context_and_a_stable_unique_idempotency_key(config, script):
    seen = []

    class InspectTool(Tool):
        tool_name = "inspect"
        description = "Record what the binding holds."

        def call(self, input):
            seen.append(
                {
                    "run": self.run,
                    "agent": self.agent,
                    "actor_id": self.run.invocation.actor_id,
                    "account_id": self.run.invocation.context["account_id"],
                    "context": self.context,
                    "key": self.idempotency_key,
                    "tag": input["tag"],
                }
            )
            return "ok"

    target = script(
        [
            {"tool_calls": [call("inspect", "a", tag="first"), call("inspect", "b", tag="second")]},
            {"tool_calls": [call("inspect", "c", tag="third")]},
            {"text": "Inspected."},
        ]
    )
    InspectAgent = agent_for(target, InspectTool)
    run = InspectAgent.ask("Inspect", actor_id="user-7", context={"account_id": "acct-1"})

    assert run.outcome == "completed"
    assert len(seen) == 3
    by_tag = {entry["tag"]: entry for entry in seen}
    for entry in seen:
        assert entry["run"] is run
        assert isinstance(entry["agent"], InspectAgent)
        assert entry["agent"].run is run
        assert entry["actor_id"] == "user-7"
        assert entry["account_id"] == "acct-1"
        assert isinstance(entry["context"], RunContext)
    assert by_tag["first"]["key"] == f"{run.id}/root/turn-0/tool/a"
    assert by_tag["second"]["key"] == f"{run.id}/root/turn-0/tool/b"
    assert by_tag["third"]["key"] == f"{run.id}/root/turn-1/tool/c"
    assert len({entry["key"] for entry in seen}) == 3


def test_tool_context_is_only_set_during_the_call(config, script):
    instances = []

    class KeepTool(Tool):
        tool_name = "keep"
        description = "Keeps itself."

        def call(self, input):
            instances.append(self)
            assert self.context is not None
            return "kept"

    target = script([{"tool_calls": [call("keep")]}, {"text": "ok"}])
    run = agent_for(target, KeepTool).ask("Go")

    assert run.outcome == "completed"
    [tool] = instances
    assert tool.context is None
    assert isinstance(tool.run, Run)


def test_context_state_changes_are_visible_to_later_tools_and_in_the_result(config, script):
    reads = []

    class RememberTool(Tool):
        tool_name = "remember"
        description = "Remember a fact."

        def call(self, input):
            self.context.state["fact"] = input["fact"]
            self.context.state["count"] = self.context.state.get("count", 0) + 1
            return "remembered"

    class RecallTool(Tool):
        tool_name = "recall"
        description = "Recall the fact."

        def call(self, input):
            reads.append(
                (
                    self.context.state.get("fact"),
                    self.context.state.get("count"),
                    self.context.state.get("plan"),
                )
            )
            return str(self.context.state.get("fact"))

    target = script(
        [
            {"tool_calls": [call("remember", fact="sky is blue")]},
            {"tool_calls": [call("recall")]},
            {"text": "Recalled."},
        ]
    )
    run = agent_for(target, RememberTool, RecallTool).ask("Go", context={"plan": "gold"})

    assert run.outcome == "completed"
    assert reads == [("sky is blue", 1, "gold")]
    assert results_of(run, 4)[0].text == "sky is blue"
    assert dict(run.result.state) == {"plan": "gold", "fact": "sky is blue", "count": 1}


class _Later:
    """A value JSON cannot hold, put where DataMap's own check does not look: into a list in the state."""


class AppendLaterTool(Tool):
    tool_name = "append_later"
    description = "Append a non-JSON value to a list in the working state."

    def call(self, input):
        self.context.state["items"].append({"when": _Later()})
        return "appended"


class _AppendingBeforeModel(Agent):
    @before_model
    def append_later(self, payload, context):
        context.state["items"].append({"when": _Later()})


class _AppendingBeforeInvocation(Agent):
    @before_invocation
    def append_later(self, payload, context):
        context.state["items"].append({"when": _Later()})


@pytest.mark.parametrize(
    ("base", "tools", "failing_step", "state_left"),
    [
        pytest.param(Agent, [AppendLaterTool], "root/turn-0/tool/call_1", {"items": ["kept"]}, id="tool"),
        pytest.param(_AppendingBeforeModel, [], "root/turn-0/model", {"items": ["kept"]}, id="before_model"),
        # An opening that fails writes nothing of the opened frame, as any failure there.
        pytest.param(_AppendingBeforeInvocation, [], "root/turn-0/model", {}, id="before_invocation-at-opening"),
    ],
)
@pytest.mark.parametrize("store", ["memory", "sqlite_file"])
def test_a_non_json_value_put_in_a_list_of_the_state_fails_the_run_naming_where_it_is(
    request, script, store, base, tools, failing_step, state_left
):
    """The commit would fail in the store's encoder, leaving the run running with no terminal
    event; the step finds it first, and the run ends failed like any failing step, keeping
    the state of its last commit."""
    config = request.getfixturevalue("config" if store == "memory" else "file_config")
    target = script([{"tool_calls": [call("append_later", "call_1")]}, {"text": "never reached"}])
    agent = type("StateAgent", (base,), {"model": target, "tools": tools})

    run = agent.ask("Go", context={"items": ["kept"]})

    assert run.outcome == "failed"
    assert isinstance(run.error, ConfigurationError)
    assert "context.state.items[1].when is a _Later" in str(run.error)
    store_ = config.runtime().store
    record = store_.load_run(run.id)
    assert (record.status, record.finished_at is not None) == ("failed", True)
    assert [event.type for event in store_.load_events(run.id)][-1] == "run_error"
    assert store_.load_step(run.id, failing_step).status == "failed"
    assert store_.load_frame(f"{run.id}/root").checkpoint["state"] == state_left


# -- usage ------------------------------------------------------------------------------------------


def test_run_context_usage_accumulates_model_and_recorded_usage(config, script):
    seen = []

    class MeterTool(Tool):
        tool_name = "meter"
        description = "Meter an external model call."

        def call(self, input):
            seen.append(self.context.usage)
            self.context.record_usage(Usage(input_tokens=100, output_tokens=1))
            return "metered"

    class MeteredAgent(Agent):
        model = script(
            [
                {"tool_calls": [call("meter")], "usage": {"input_tokens": 7, "output_tokens": 3}},
                {"text": "Done.", "usage": {"input_tokens": 5, "output_tokens": 2}},
            ]
        )
        tools = [MeterTool]

        @after_invocation
        def at_end(self, payload, context):
            seen.append(context.usage)

    run = MeteredAgent.ask("Go")

    total = Usage(input_tokens=112, output_tokens=6)
    assert run.outcome == "completed"
    assert seen == [Usage(input_tokens=7, output_tokens=3), total]
    assert run.usage == total
    assert run.result.usage == total
    assert Usage.from_dict(run.runtime.store.load_run(run.id).usage) == total


def test_usage_recorded_by_parallel_tools_counts_once_each_after_a_version_conflict(config, script):
    store = config.runtime().store
    conflicts = []
    commit = store.commit

    def counting_commit(step_commit, *now):
        result = commit(step_commit, *now)
        if result.reason == "frame_version_conflict":
            conflicts.append(step_commit.step_key)
        return result

    store.commit = counting_commit
    barrier = threading.Barrier(2, timeout=30)

    class FirstTool(Tool):
        tool_name = "first"
        description = "Commits first."

        def call(self, input):
            barrier.wait()
            self.context.record_usage(Usage(input_tokens=100))
            return "first"

    class SecondTool(Tool):
        tool_name = "second"
        description = "Commits after the first one did."

        def call(self, input):
            barrier.wait()
            deadline = time.monotonic() + 30
            while store.load_step(self.run.id, "root/turn-0/tool/c1").status != "succeeded":
                assert time.monotonic() < deadline
                time.sleep(0.01)
            # As if another process had committed the first call: this one's frame is then stale
            # (in one process the second call would commit from the frame the first one left).
            config.runtime().engine.frames.forget_run(self.run.id)
            self.context.record_usage(Usage(input_tokens=20))
            return "second"

    target = script(
        [
            {"tool_calls": [call("first", "c1"), call("second", "c2")], "usage": {"input_tokens": 3}},
            {"text": "Done.", "usage": {"input_tokens": 4}},
        ]
    )
    run = agent_for(target, FirstTool, SecondTool).ask("Both")

    assert run.outcome == "completed"
    assert conflicts == ["root/turn-0/tool/c2"], "the second call's commit was re-run on the newer frame"
    assert run.usage == Usage(input_tokens=127)


def test_usage_recorded_by_an_opening_callback_counts(config, script):
    class PreparedAgent(Agent):
        model = script([{"text": "Done.", "usage": {"input_tokens": 5}}])

        @before_invocation
        def summarize_history(self, payload, context):
            context.record_usage(Usage(input_tokens=50))  # e.g. a summary made by another model

    run = PreparedAgent.ask("Go")

    assert run.outcome == "completed"
    assert run.usage == Usage(input_tokens=55)


# -- providers and available_if -------------------------------------------------------------------


class AccountStatusTool(Tool):
    description = "Account status."

    def call(self, input):
        return "active"


class CloseAccountTool(Tool):
    description = "Close the account."

    def call(self, input):
        return "closed"


class AccountTools:
    @classmethod
    def tools(cls, binding):
        may_close = binding.run.invocation.context.get("may_close_account")
        return [AccountStatusTool, [CloseAccountTool if may_close else None]]


class SlackOnlyTool(Tool):
    description = "Update a Slack message."
    # The staticmethod form, which Tool accepts as it accepts a plain function (mypy reads the
    # ClassVar Callable as a method and so expects no argument: the ignore is for mypy only).
    available_if = staticmethod(lambda binding: binding.run.invocation.get("interface") == "slack")  # type: ignore[assignment]

    def call(self, input):
        return "updated"


def test_tool_provider_and_available_if_decide_the_tools_per_run(config, script):
    turns = [{"tool_calls": [call("close_account")]}, {"text": "Done."}]
    target, requests = recording_script(script, turns)
    GatedAgent = agent_for(target, AccountTools, SlackOnlyTool)

    allowed = GatedAgent.ask("Close it", context={"may_close_account": True}, interface="slack")
    assert allowed.outcome == "completed"
    assert offered_tools(requests) == ["account_status", "close_account", "slack_only"]
    assert results_of(allowed)[0].text == "closed"

    requests.clear()
    denied = GatedAgent.ask("Close it", context={"may_close_account": False}, interface="web")
    assert denied.outcome == "completed"
    assert offered_tools(requests) == ["account_status"]
    [result] = results_of(denied)
    assert result.status == "error"
    assert "Unknown tool 'close_account'" in result.text
    assert "Available tools: account_status." in result.text


def test_tools_are_built_fresh_for_each_step_and_closed(config, script):
    closed = []
    built = []

    class ClosingTool(Tool):
        tool_name = "closing"
        description = "Has a close()."

        def __init__(self, binding=None):
            super().__init__(binding)
            built.append(self)

        def call(self, input):
            return "ok"

        def close(self):
            closed.append(self)

    target = script([{"tool_calls": [call("closing")]}, {"text": "ok"}])
    run = agent_for(target, ClosingTool).ask("Go")

    assert run.outcome == "completed"
    assert built, "the tool was never built"
    assert sorted(map(id, closed)) == sorted(map(id, built)), "every built tool instance is closed"


def test_a_tool_step_row_says_whether_its_call_may_run_twice(config, script):
    """A worker's claim of an idempotent call need not be durable; an at_most_once call's must be."""

    class ChargeTool(Tool):
        description = "Charge a card."
        at_most_once = True

        def call(self, input):
            return "charged"

    class LookupTool(Tool):
        description = "Look something up."

        def call(self, input):
            return "found"

    agent = agent_for(
        script([{"tool_calls": [call("charge", "c"), call("lookup", "l")]}, {"text": "done"}]), ChargeTool, LookupTool
    )
    run = agent.ask("Go")

    steps = {s.input["name"]: s.input for s in config.runtime().store.load_steps(run.id) if s.kind == "tool"}
    assert run.completed
    assert steps["lookup"].get("idempotent") is True
    assert "idempotent" not in steps["charge"]


# -- a return value that cannot become content --------------------------------------------


def test_a_tool_returning_a_bad_artifact_gets_an_unexpected_tool_error_not_a_failed_run(config, script):
    from lg_core import Artifact

    class ReportTool(Tool):
        description = "Report."

        def call(self, input):
            return Tool.Result(value={"rows": 1}, artifacts=[Artifact(data="a,b\n1,2", media_type="text/csv")])

    class UnprintableTool(Tool):
        description = "Returns something with no text form."

        def call(self, input):
            class Unprintable:
                def __str__(self):
                    raise RuntimeError("private detail")

            return Unprintable()

    target = script([{"tool_calls": [call("report", "r"), call("unprintable", "u")]}, {"text": "done"}])
    run = agent_for(target, ReportTool, UnprintableTool).ask("Go")

    assert run.outcome == "completed", repr(run.error)
    report, unprintable = results_of(run)
    assert report.status == "error"
    assert report.text == "Tool 'report' failed with an internal error (TypeError)."
    assert unprintable.status == "error"
    assert unprintable.text == "Tool 'unprintable' failed with an internal error (RuntimeError)."


def test_a_tool_returning_content_blocks_sends_them_in_its_tool_result(config, script):
    """The spec: "Content blocks may also accompany a Tool result." The model was told
    "internal error (PydanticSerializationError)" instead of being shown the image."""
    from lg_core import Document, Image

    photo = Image(data=b"\x89PNG\r\n\x1a\n\xff", media_type="image/png", name="damage.png")
    guide = Document(data=b"%PDF-1.7", media_type="application/pdf", name="guide.pdf")

    class PhotoTool(Tool):
        description = "Returns the damage photo."

        def call(self, input):
            return photo

    class GuideTool(Tool):
        description = "Returns the guide and a photo."

        def call(self, input):
            return [guide, photo]

    target, requests = recording(script, [{"tool_calls": [call("photo", "p"), call("guide", "g")]}, {"text": "seen"}])
    run = agent_for(target, PhotoTool, GuideTool).ask("Go")

    assert run.outcome == "completed", repr(run.error)
    assert run.diagnostics == []
    photo_result, guide_result = results_of(run)
    assert (photo_result.status, photo_result.content) == ("success", (photo,))
    assert (guide_result.status, guide_result.content) == ("success", (guide, photo))
    assert requests[1].messages[2].tool_results[0].content == (photo,)  # what the model was sent


# -- tool instances from a provider ---------------------------------------------------------


def test_tool_instances_from_a_provider_are_bound_to_the_run_and_closed(config, script):
    closed = []

    class WhoTool(Tool):
        description = "Who runs me?"

        def call(self, input):
            return self.run.id if self.run is not None else "unbound"

        def close(self):
            closed.append(self)

    built = []

    class WhoProvider:
        @classmethod
        def tools(cls, binding):
            built.append(WhoTool())
            return [built[-1]]

    target = script([{"tool_calls": [call("who")]}, {"text": "done"}])
    run = agent_for(target, WhoProvider).ask("Go")

    assert run.outcome == "completed", repr(run.error)
    assert results_of(run)[0].text == run.id
    assert built and sorted(map(id, closed)) == sorted(map(id, built)), "each provided instance closed once"


# -- tools that raise BaseExceptions --------------------------------------------------------


def test_an_async_tool_whose_own_task_is_cancelled_fails_as_a_tool_not_the_run(config, script):
    """asyncio.CancelledError is a BaseException: it escaped ask() and left the run running for good."""

    class FetchTool(Tool):
        tool_name = "fetch"
        description = "Fetch."

        async def call(self, input):
            task = asyncio.ensure_future(asyncio.sleep(10))
            asyncio.get_running_loop().call_later(0.01, task.cancel)
            await task

    target = script([{"tool_calls": [call("fetch", "c1")]}, {"text": "Recovered."}])
    run = agent_for(target, FetchTool).ask("Fetch")

    assert (run.outcome, run.response) == ("completed", "Recovered.")
    [result] = results_of(run)
    assert result.status == "error" and "internal error (CancelledError)" in result.content[0].text


class InterruptedOnceTool(Tool):
    tool_name = "stop"
    description = "Interrupted the first time it is called."
    interrupt: list[bool] = []

    def call(self, input):
        if InterruptedOnceTool.interrupt:
            InterruptedOnceTool.interrupt.pop()
            raise KeyboardInterrupt
        return "went on"


class InterruptibleAgent(Agent):  # module level: resume rebuilds the run from its import path
    model = "scripted:interruptible-agent"
    tools = [InterruptedOnceTool]


def test_a_run_a_tool_interrupted_stays_resumable_in_the_same_process(file_config):
    """KeyboardInterrupt from a tool stops ask() as a killed process would; resume then refused
    with "executing in this process", for as long as the process lived."""
    scripted.register("interruptible-agent", [{"tool_calls": [call("stop", "c1")]}, {"text": "Resumed."}])
    InterruptedOnceTool.interrupt = [True]
    try:
        with pytest.raises(KeyboardInterrupt):
            InterruptibleAgent.ask("Stop", run_id="interrupted-1")
        assert lg_core.get_run("interrupted-1").outcome is None  # still running in the store

        resumed = lg_core.resume("interrupted-1")
        assert (resumed.outcome, resumed.response) == ("completed", "Resumed.")
    finally:
        scripted.unregister("interruptible-agent")


def test_record_usage_takes_a_usage_or_a_mapping_of_counts_and_names_what_it_takes_otherwise(config, script):
    outcomes: list[str] = []

    class MeteredTool(Tool):
        tool_name = "metered"
        description = "Records usage."

        def call(self, input):
            self.context.record_usage({"input_tokens": 7})
            for bad in (None, 12, {"tokens": 1}):
                try:
                    self.context.record_usage(bad)
                except TypeError as exc:  # was "unsupported operand type(s) for +"
                    outcomes.append(str(exc))
            return "ok"

    target = script(
        [
            {"tool_calls": [call("metered", "c1")], "usage": {"input_tokens": 3}},
            {"text": "Done.", "usage": {"input_tokens": 4}},
        ]
    )
    run = agent_for(target, MeteredTool).ask("Meter")

    assert run.usage.input_tokens == 3 + 7 + 4
    assert outcomes[0] == "record_usage takes a Usage or a mapping like {'input_tokens': 12}, got NoneType"
    assert outcomes[1].endswith("got int")
    assert "unknown token counts ['tokens']" in outcomes[2]


# -- a model that accepts no tools --------------------------------------------------------------------


class ConditionalLookupTool(Tool):
    tool_name = "conditional_lookup"
    description = "Look up, only when the context asks for it."

    @staticmethod
    def available_if(binding):
        return bool(binding.run.invocation.context.get("lookups"))

    def call(self, input):
        return "found"


def test_tools_on_a_model_whose_capabilities_refuse_them_raise_before_a_run_exists(config, script):
    """The spec's ModelCapabilities#tools: "Whether the model accepts tool definitions"; they were sent anyway."""
    calls = []
    target = script(lambda request: calls.append(request) or {"text": "ok"}, capabilities={"tools": False})
    agent = agent_for(target, AccountStatusTool)

    for start in (agent.ask, agent.stream_ask, agent.start_execution):
        with pytest.raises(
            ConfigurationError,
            match=r"does not accept tools \(its capabilities say tools: false\), but ToolAgent offers 'account_status'",
        ):
            start("Count")
    assert calls == [] and lg_core.list_runs() == []


def test_a_conditional_tool_on_such_a_model_fails_the_turn_that_would_offer_it(config, script):
    calls = []
    target = script(lambda request: calls.append(request) or {"text": "ok"}, capabilities={"tools": False})
    agent = agent_for(target, ConditionalLookupTool)

    assert agent.ask("No lookups needed").completed  # offers no tool: nothing to refuse
    run = agent.ask("Look it up", context={"lookups": True})

    assert run.outcome == "failed" and isinstance(run.error, ConfigurationError)
    assert "offers 'conditional_lookup'" in str(run.error)
    assert len(calls) == 1
