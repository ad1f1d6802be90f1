"""Agent callbacks in real runs: payloads, replace, cancel, context and ordering."""

from __future__ import annotations

import asyncio
import warnings

import pytest

from lg_core import (
    Agent,
    Message,
    ModelRequest,
    ModelResponse,
    RunContext,
    RunResult,
    Tool,
    ToolOutcome,
    ToolUse,
    Usage,
    after_initialize,
    after_invocation,
    after_model,
    after_model_error,
    after_tool,
    before_invocation,
    before_model,
    before_tool,
    cancel,
    replace,
)
from lg_core.callbacks import run_chain
from lg_core.errors import CancelledError, ConfigurationError, ProviderError
from tests.support.recording import recording


class EchoTool(Tool):
    description = "Echo the text."
    input_schema = {
        "type": "object",
        "properties": {"text": {"type": "string"}},
        "required": ["text"],
        "additionalProperties": False,
    }

    def call(self, input):
        return f"echo: {input['text']}"


ECHO_TURNS = [
    {"tool_calls": [{"name": "echo", "id": "call_1", "arguments": {"text": "hi"}}]},
    {"text": "All done."},
]


def tool_result(run):
    message = run.result.messages[2]
    assert message.role == "tool"
    return message.tool_results[0]


# -- payloads ----------------------------------------------------------------------------------


def test_every_callback_receives_its_documented_payload(config, script):
    turns = [{"error": {"kind": "rate_limit", "message": "busy"}}, *ECHO_TURNS]
    target, _ = recording(script, turns)
    seen: dict[str, list] = {}

    class WatchedAgent(Agent):
        model = target
        tools = [EchoTool]

        def note(self, name, payload):
            seen.setdefault(name, []).append(payload)

        @after_initialize
        def on_init(self, agent):
            self.note("after_initialize", agent)

        @before_invocation
        def on_before_invocation(self, payload):
            self.note("before_invocation", payload)

        @after_invocation
        def on_after_invocation(self, payload):
            self.note("after_invocation", payload)

        @before_model
        def on_before_model(self, payload):
            self.note("before_model", payload)

        @after_model
        def on_after_model(self, payload):
            self.note("after_model", payload)

        @after_model_error
        def on_after_model_error(self, payload):
            self.note("after_model_error", payload)

        @before_tool
        def on_before_tool(self, payload):
            self.note("before_tool", payload)

        @after_tool
        def on_after_tool(self, payload):
            self.note("after_tool", payload)

    run = WatchedAgent.ask("Say hi")
    assert run.outcome == "completed"

    assert all(isinstance(agent, WatchedAgent) for agent in seen["after_initialize"])
    assert all(agent.run is run for agent in seen["after_initialize"])

    [before_inv] = seen["before_invocation"]
    assert set(before_inv) == {"messages"}
    assert [m.text for m in before_inv["messages"]] == ["Say hi"]

    [after_inv] = seen["after_invocation"]
    assert set(after_inv) == {"result"}
    assert isinstance(after_inv["result"], RunResult)
    assert after_inv["result"].text == "All done."

    before_models = seen["before_model"]
    assert [p["turn"] for p in before_models] == [0, 1]
    for payload in before_models:
        assert set(payload) == {"request", "turn", "parent_operation_id"}
        assert isinstance(payload["request"], ModelRequest)

    after_models = seen["after_model"]
    assert [p["turn"] for p in after_models] == [0, 1]
    for payload in after_models:
        assert {"request", "response", "turn"} <= set(payload)
        assert isinstance(payload["response"], ModelResponse)
    assert after_models[1]["response"].text == "All done."

    [model_error] = seen["after_model_error"]
    assert set(model_error) == {"request", "error", "turn", "parent_operation_id"}
    assert isinstance(model_error["error"], ProviderError)
    assert str(model_error["error"]) == "busy"
    assert model_error["turn"] == 0

    [before] = seen["before_tool"]
    assert set(before) == {"tool_use", "tool", "operation_id", "parent_operation_id"}
    assert before["tool_use"] == ToolUse(id="call_1", name="echo", input={"text": "hi"})
    assert isinstance(before["tool"], EchoTool)
    assert before["tool"].run is run
    assert before["operation_id"] == "root/turn-0/tool/call_1"

    [after] = seen["after_tool"]
    assert set(after) == set(before) | {"result"}
    assert isinstance(after["result"], ToolOutcome)
    assert after["result"].text == "echo: hi"
    assert after["result"].value == "echo: hi"


def test_after_tool_sees_the_original_exception_of_an_unexpected_failure(config, script):
    class BrokenTool(Tool):
        tool_name = "echo"
        description = "Broken."

        def call(self, input):
            raise KeyError("secret-key-name")

    errors = []

    class InspectingAgent(Agent):
        model = script(ECHO_TURNS)
        tools = [BrokenTool]

        @after_tool
        def inspect(self, payload):
            errors.append(payload["result"].error)

    run = InspectingAgent.ask("Go")

    assert run.outcome == "completed"
    [error] = errors
    assert isinstance(error, KeyError)
    assert "secret-key-name" in str(error)
    assert "secret-key-name" not in tool_result(run).text


# -- context -------------------------------------------------------------------------------------


def test_callbacks_accepting_context_receive_the_run_context(config, script):
    contexts = []

    class ContextAgent(Agent):
        model = script(ECHO_TURNS)
        tools = [EchoTool]

        @before_model
        def with_context(self, payload, context):
            contexts.append(("before_model", context))

        @before_tool
        def with_kwargs(self, payload, **kwargs):
            contexts.append(("before_tool", kwargs.get("context")))
            kwargs["context"].state["seen_by_callback"] = True

        @after_invocation
        def without_context(self, payload):
            contexts.append(("after_invocation", None))

    run = ContextAgent.ask("Go", context={"tenant": "t1"})

    assert run.outcome == "completed"
    names = [name for name, _ in contexts]
    assert names == ["before_model", "before_tool", "before_model", "after_invocation"]
    for name, context in contexts[:-1]:
        assert isinstance(context, RunContext), name
        assert context.state["tenant"] == "t1"
    assert run.result.state["seen_by_callback"] is True


def test_the_agent_has_its_resolved_model_in_every_callback(config, script):
    seen = []

    class ModelAgent(Agent):
        model = script(ECHO_TURNS)
        tools = [EchoTool]

        @after_initialize
        def on_initialize(self, agent):
            seen.append(("after_initialize", agent.model))

        @before_invocation
        def on_before_invocation(self, payload):
            seen.append(("before_invocation", self.model))

        @before_model
        def on_before_model(self, payload):
            seen.append(("before_model", self.model))

        @after_invocation
        def on_after_invocation(self, payload):
            seen.append(("after_invocation", self.model))

    run = ModelAgent.ask("Go")

    assert run.outcome == "completed"
    assert [name for name, _ in seen][:3] == ["after_initialize", "before_invocation", "after_initialize"]
    targets = {getattr(model, "target", None) for _name, model in seen}
    assert targets == {ModelAgent.model}, seen


# -- replace -------------------------------------------------------------------------------------


def test_before_invocation_replacement_changes_the_conversation(config, script):
    target, requests = recording(script, [{"text": "ok"}])

    class PrefixAgent(Agent):
        model = target

        @before_invocation
        def add_history(self, payload):
            note = Message(role="user", content="Context: customer is VIP.")
            return replace({"messages": [note, *payload["messages"]]})

    run = PrefixAgent.ask("Hello")

    assert run.outcome == "completed"
    assert [m.text for m in requests[0].messages] == ["Context: customer is VIP.", "Hello"]
    assert [m.text for m in run.result.messages] == ["Context: customer is VIP.", "Hello", "ok"]


def test_before_model_replacement_is_the_request_sent(config, script):
    target, requests = recording(script, [{"text": "ok"}])

    class TunedAgent(Agent):
        model = target

        @before_model
        def tune(self, payload):
            return replace({**payload, "request": payload["request"].with_settings(temperature=0.1)})

    run = TunedAgent.ask("Hello", settings={"top_p": 0.5})

    assert run.outcome == "completed"
    assert dict(requests[0].settings) == {"top_p": 0.5, "temperature": 0.1}


def test_after_model_replacement_is_the_response_used(config, script):
    class RewritingAgent(Agent):
        model = script([{"text": "raw answer"}])

        @after_model
        def rewrite(self, payload):
            response = payload["response"]
            message = Message(role="assistant", content="polished answer")
            return replace({**payload, "response": ModelResponse(message=message, usage=response.usage)})

    run = RewritingAgent.ask("Hello")

    assert run.outcome == "completed"
    assert run.response == "polished answer"
    assert run.result.messages[-1].text == "polished answer"


def test_after_tool_replacement_is_what_the_model_sees(config, script):
    target, requests = recording(script, ECHO_TURNS)

    class RedactingAgent(Agent):
        model = target
        tools = [EchoTool]

        @after_tool
        def redact(self, payload):
            return replace({**payload, "result": "[redacted]"})

    run = RedactingAgent.ask("Go")

    assert run.outcome == "completed"
    assert tool_result(run).text == "[redacted]"
    assert requests[1].messages[-1].tool_results[0].text == "[redacted]"


def test_after_invocation_replacement_is_the_delivered_result(config, script):
    class SigningAgent(Agent):
        model = script([{"text": "answer"}])

        @after_invocation
        def sign(self, payload):
            result = payload["result"]
            signed = Message(role="assistant", content=result.text + " -- support team")
            return replace(
                {"result": RunResult(signed, result.stop_reason, result.usage, result.messages, result.state)}
            )

    run = SigningAgent.ask("Hello")

    assert run.outcome == "completed"
    assert run.response == "answer -- support team"
    assert run.result.text == "answer -- support team"


def test_before_tool_replacement_is_not_consumed(config, script):
    class ReplacingAgent(Agent):
        model = script(ECHO_TURNS)
        tools = [EchoTool]

        @before_tool
        def swap_input(self, payload):
            other = ToolUse(id=payload["tool_use"].id, name="echo", input={"text": "swapped"})
            return replace({**payload, "tool_use": other})

    run = ReplacingAgent.ask("Go")

    assert run.outcome == "completed"
    assert tool_result(run).text == "echo: hi"


@pytest.mark.parametrize(
    "callback, payload",
    [
        (before_invocation, {"msgs": []}),
        (before_model, {"req": None}),
        (after_model, {"request": None}),
        (after_invocation, {"res": None}),
    ],
    ids=["before_invocation", "before_model", "after_model", "after_invocation"],
)
def test_a_replacement_missing_its_required_key_fails_the_run_with_configuration_error(
    config, script, callback, payload
):
    class BadAgent(Agent):
        model = script([{"text": "ok"}])

        @callback
        def broken(self, _payload):
            return replace(payload)

    run = BadAgent.ask("Hello")

    assert run.outcome == "failed"
    assert isinstance(run.error, ConfigurationError)
    assert "broken" in str(run.error)
    assert [e.type for e in run.events()][-1] == "run_error"


@pytest.mark.parametrize(
    "callback, turns, replacement, expected",
    [
        (before_model, [{"text": "ok"}], lambda p: {**p, "request": {"messages": []}}, "ModelRequest"),
        (after_model, [{"text": "raw"}], lambda p: {**p, "response": "polished"}, "ModelResponse"),
        (
            after_model_error,
            [{"error": "boom"}, {"text": "ok"}],
            lambda p: {**p, "request": {"messages": []}},
            "ModelRequest",
        ),
        (after_invocation, [{"text": "ok"}], lambda p: {"result": "just text"}, "RunResult"),
        (after_invocation, [{"text": "ok"}], lambda p: {"result": None}, "RunResult"),
    ],
    ids=["before_model", "after_model", "after_model_error", "after_invocation", "after_invocation_none"],
)
def test_a_replacement_of_the_wrong_type_fails_the_run_with_configuration_error(
    config, script, callback, turns, replacement, expected
):
    class BadAgent(Agent):
        model = script(turns)

        @callback
        def broken(self, payload):
            return replace(replacement(payload))

    run = BadAgent.ask("Hello")

    assert run.outcome == "failed"
    assert isinstance(run.error, ConfigurationError), repr(run.error)
    assert "broken" in str(run.error)
    assert expected in str(run.error)


def test_after_model_error_replacing_the_request_with_a_model_request_retries(config, script):
    class RecoveringAgent(Agent):
        model = script([{"error": "boom"}, {"text": "recovered"}])

        @after_model_error
        def retry(self, payload):
            return replace({**payload, "request": payload["request"].with_settings(top_p=0.5)})

    run = RecoveringAgent.ask("Hello")

    assert run.outcome == "completed", repr(run.error)
    assert run.result.message.text == "recovered"


def test_an_after_invocation_callback_raising_fails_the_run_instead_of_escaping(config, script):
    class CrashingAgent(Agent):
        model = script([{"text": "ok"}])

        @after_invocation
        def crash(self, payload):
            raise RuntimeError("audit log unavailable")

    run = CrashingAgent.ask("Hello")

    assert run.outcome == "failed"
    assert isinstance(run.error, RuntimeError)
    assert run.response is None
    assert config.runtime().store.load_run(run.id).status == "failed", "the stored run must not stay running"
    assert [e.type for e in run.events()][-1] == "run_error"


@pytest.mark.parametrize("outcome", ["failed", "cancelled"])
def test_the_model_call_before_a_failing_callback_counts_in_the_run_usage(config, script, outcome):
    class StrictAgent(Agent):
        model = script([{"text": "ok", "usage": {"input_tokens": 9, "output_tokens": 4}}])

        @after_model
        def reject(self, payload):
            if outcome == "cancelled":
                return cancel("not today")
            raise RuntimeError("audit log unavailable")

    run = StrictAgent.ask("Hello")

    assert run.outcome == outcome
    assert run.usage == Usage(input_tokens=9, output_tokens=4)
    assert Usage.from_dict(config.runtime().store.load_run(run.id).usage) == run.usage


def test_a_raising_after_invocation_counts_the_final_turn_once(config, script):
    class CrashingAgent(Agent):
        model = script([{"text": "ok", "usage": {"input_tokens": 9, "output_tokens": 4}}])

        @after_invocation
        def crash(self, payload):
            raise RuntimeError("audit log unavailable")

    run = CrashingAgent.ask("Hello")

    assert run.outcome == "failed"
    assert run.usage == Usage(input_tokens=9, output_tokens=4)


# -- cancel --------------------------------------------------------------------------------------


def test_before_tool_cancel_gives_the_model_an_error_result_with_the_reason(config, script):
    calls = []

    class GuardedTool(EchoTool):
        tool_name = "echo"

        def call(self, input):
            calls.append(input)
            return super().call(input)

    class GuardedAgent(Agent):
        model = script(ECHO_TURNS)
        tools = [GuardedTool]

        @before_tool
        def deny(self, payload):
            return cancel("Echo is disabled for this account.")

    run = GuardedAgent.ask("Go")

    assert run.outcome == "completed"
    assert calls == []
    result = tool_result(run)
    assert result.status == "error"
    assert result.text == "Echo is disabled for this account."


def test_before_model_cancel_cancels_the_run(config, script):
    calls = []

    def serve(request):
        calls.append(request)
        return {"text": "never"}

    class StoppingAgent(Agent):
        model = script(serve)

        @before_model
        def stop(self, payload):
            return cancel("budget exhausted")

    run = StoppingAgent.ask("Hello")

    assert run.outcome == "cancelled"
    assert run.response is None
    assert isinstance(run.error, CancelledError)
    assert "budget exhausted" in str(run.error)
    assert calls == []
    assert [e.type for e in run.events()][-1] == "run_cancel"


@pytest.mark.parametrize(
    "callback, turns",
    [
        (after_model, [{"text": "answer"}]),
        (after_model_error, [{"error": "down"}, {"text": "never"}]),
        (after_invocation, [{"text": "answer"}]),
    ],
    ids=["after_model", "after_model_error", "after_invocation"],
)
def test_cancel_from_a_model_or_invocation_callback_cancels_the_run(config, script, callback, turns):
    class CancellingAgent(Agent):
        model = script(turns)

        @callback
        def stop(self, payload):
            return cancel("policy says stop")

    run = CancellingAgent.ask("Hello")

    assert run.outcome == "cancelled"
    assert run.response is None
    assert run.result is None
    assert "policy says stop" in str(run.error)
    assert [e.type for e in run.events() if e.terminal] == ["run_cancel"]


def test_before_invocation_cancel_cancels_before_any_model_call(config, script):
    class RefusingAgent(Agent):
        model = script([{"text": "never"}])

        @before_invocation
        def refuse(self, payload):
            return cancel("outside business hours")

    run = RefusingAgent.ask("Hello")

    assert run.outcome == "cancelled"
    assert "outside business hours" in str(run.error)
    assert "message_stop" not in [e.type for e in run.events()]


def test_after_tool_cancel_is_not_consumed(config, script):
    class ObservingAgent(Agent):
        model = script(ECHO_TURNS)
        tools = [EchoTool]

        @after_tool
        def try_cancel(self, payload):
            return cancel("ignored")

    run = ObservingAgent.ask("Go")

    assert run.outcome == "completed"
    assert tool_result(run).text == "echo: hi"


def test_cancel_stops_the_rest_of_the_chain(config, script):
    order = []

    class ChainAgent(Agent):
        model = script([{"text": "never"}])

        @before_model
        def first(self, payload):
            order.append("first")
            return cancel("stop")

        @before_model
        def second(self, payload):
            order.append("second")

    run = ChainAgent.ask("Hello")

    assert run.outcome == "cancelled"
    assert order == ["first"]


# -- ordering ------------------------------------------------------------------------------------


def test_parent_callbacks_run_before_child_callbacks_and_prepend_runs_first(config, script):
    order = []
    target = script([{"text": "ok"}])

    class ParentAgent(Agent):
        model = target

        @before_model
        def parent_hook(self, payload):
            order.append("parent")

    class ChildAgent(ParentAgent):
        @before_model
        def child_hook(self, payload):
            order.append("child")

        @before_model(prepend=True)
        def urgent_hook(self, payload):
            order.append("prepended")

    run = ChildAgent.ask("Hello")
    assert run.outcome == "completed"
    assert order == ["prepended", "parent", "child"]

    order.clear()
    parent_run = ParentAgent.ask("Hello")
    assert parent_run.outcome == "completed"
    assert order == ["parent"], "a subclass's callbacks do not leak into the parent"


def test_replacements_flow_through_the_chain_in_order(config, script):
    target, requests = recording(script, [{"text": "ok"}])

    class BaseTuned(Agent):
        model = target

        @before_model
        def base(self, payload):
            return replace({**payload, "request": payload["request"].with_settings(trail="base")})

    class ChildTuned(BaseTuned):
        @before_model
        def child(self, payload):
            trail = payload["request"].settings["trail"]
            return replace({**payload, "request": payload["request"].with_settings(trail=trail + ">child")})

    run = ChildTuned.ask("Hello")

    assert run.outcome == "completed"
    assert requests[0].settings["trail"] == "base>child"


# -- async callbacks -----------------------------------------------------------------------------


def test_an_async_before_tool_cancel_stops_the_call(config, script):
    """An async guard's coroutine was taken for "continue": the tool ran despite cancel()."""
    calls = []

    class GuardedTool(EchoTool):
        tool_name = "echo"

        def call(self, input):
            calls.append(input)
            return super().call(input)

    class AsyncGuardedAgent(Agent):
        model = script(ECHO_TURNS)
        tools = [GuardedTool]

        @before_tool
        async def deny(self, payload, context):
            await asyncio.sleep(0)
            return cancel(f"Echo is disabled (seen {payload['tool_use'].name}).")

    run = AsyncGuardedAgent.ask("Go")

    assert run.outcome == "completed"
    assert calls == []
    assert tool_result(run).status == "error"
    assert tool_result(run).text == "Echo is disabled (seen echo)."


@pytest.mark.parametrize(
    "callback, turns",
    [
        (before_invocation, [{"text": "never"}]),
        (before_model, [{"text": "never"}]),
        (after_model, [{"text": "answer"}]),
        (after_model_error, [{"error": "down"}, {"text": "never"}]),
        (after_invocation, [{"text": "answer"}]),
    ],
    ids=["before_invocation", "before_model", "after_model", "after_model_error", "after_invocation"],
)
def test_an_async_callback_cancel_cancels_the_run(config, script, callback, turns):
    class AsyncCancellingAgent(Agent):
        model = script(turns)

        @callback
        async def stop(self, payload):
            return cancel("async policy says stop")

    run = AsyncCancellingAgent.ask("Hello")

    assert run.outcome == "cancelled"
    assert "async policy says stop" in str(run.error)


def test_an_async_replacement_is_used_and_checked(config, script):
    class AsyncReplacingAgent(Agent):
        model = script(ECHO_TURNS)
        tools = [EchoTool]

        @after_tool
        async def redact(self, payload):
            return replace({**payload, "result": "[redacted]"})

        @after_initialize
        async def prepare(self, payload, context):
            context.state["prepared"] = True

    run = AsyncReplacingAgent.ask("Go")

    assert run.outcome == "completed"
    assert tool_result(run).text == "[redacted]"
    assert run.result.state["prepared"] is True


def test_an_async_callback_in_a_thread_running_an_event_loop_is_a_configuration_error():
    """Running it is impossible there, and skipping it would skip the guard: refused, saying why."""

    class LoopGuardedAgent(Agent):
        @before_model
        async def guard(self, payload):
            return cancel("never reached")

    async def in_a_coroutine():
        return run_chain(LoopGuardedAgent(), "before_model", {"request": None})

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the unrun coroutine is closed: no "never awaited" warning
        with pytest.raises(
            ConfigurationError,
            match=r"LoopGuardedAgent\.guard \(before_model callback\) is async, but an event loop is already running",
        ):
            asyncio.run(in_a_coroutine())


@pytest.mark.parametrize("callback", [after_model, after_tool, after_invocation, after_model_error])
def test_replacement_errors_use_the_article_of_the_callback_name(callback):
    class ArticleAgent(Agent):
        @callback
        def broken(self, payload):
            return replace({})

    with pytest.raises(ConfigurationError, match=rf"; an {callback.__name__} replacement must be"):
        run_chain(ArticleAgent(), callback.__name__, {})
