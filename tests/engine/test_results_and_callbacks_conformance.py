"""Spec conformance of structured results, Agent callbacks, the opening deadline and RunContext.checkpoint."""

from __future__ import annotations

import dataclasses
import time
from datetime import UTC, datetime, timedelta

import pytest

import lg_core
from lg_core import (
    Agent,
    ModelCapabilities,
    RunContext,
    StructuredResult,
    after_invocation,
    before_invocation,
    replace,
)
from lg_core.content import ToolResult, ToolUse
from lg_core.errors import ConfigurationError, DeadlineExceededError

ANSWER = {
    "name": "answer",
    "type": "object",
    "properties": {"answer": {"type": "string"}},
    "required": ["answer"],
    "additionalProperties": False,
}


# -- RunContext#check! raised by a callback while the run opens ------------------------------------


def test_a_deadline_raised_by_a_before_invocation_callback_ends_the_run_partial(config, script):
    # The spec (Core Concepts, "See how a call ended"): "The deadline stopped work |
    # `partial` | `:run_partial` | Returns the Run with any response produced so far";
    # RunContext#check! "Raises ... DeadlineExceededError when execution should stop",
    # and a callback "may also accept `context:` to receive the current RunContext".
    class PatientAgent(Agent):
        model = script([{"text": "never sent"}])

        @before_invocation
        def slow_preparation(self, payload, context):
            time.sleep(0.2)
            context.check()

    run = PatientAgent.ask("Hi", deadline=datetime.now(UTC) + timedelta(seconds=0.05))

    assert run.outcome == "partial"
    assert isinstance(run.error, DeadlineExceededError)
    assert run.events()[-1].type == "run_partial"
    assert [r.status for r in lg_core.list_runs()] == ["partial"], "the stored run is not left running"


# -- result_schema: the supported subset is checked when the Agent is defined ------------------------


@pytest.mark.parametrize(
    "ref",
    ["#/$defs/missing", "https://example.com/answer.json", "other.json#/$defs/text"],
)
def test_a_result_schema_ref_that_does_not_resolve_inside_the_schema_fails_at_class_definition(ref):
    # The spec: "LittleGhost checks the supported JSON Schema subset when the Agent is
    # defined"; "Invalid schemas and strategies raise LittleGhost::ConfigurationError
    # before execution begins." Such a $ref was accepted, and every returned value then
    # failed validation with a referencing error in the middle of the run.
    schema = {**ANSWER, "properties": {"answer": {"$ref": ref}}}
    with pytest.raises(ConfigurationError, match=r"\$ref"):

        class RefAgent(Agent):
            result_schema = schema


def test_a_result_schema_ref_to_a_local_definition_is_accepted():
    schema = {
        **ANSWER,
        "properties": {"answer": {"$ref": "#/$defs/text"}},
        "$defs": {"text": {"type": "string"}},
    }

    class LocalRefAgent(Agent):
        result_schema = schema

    assert LocalRefAgent.result_spec().validate({"answer": "yes"}) == []
    assert LocalRefAgent.result_spec().validate({"answer": 5})


def test_a_result_schema_holding_non_json_values_fails_with_configuration_error():
    # The spec: invalid schemas "raise LittleGhost::ConfigurationError before execution begins".
    schema = {**ANSWER, "required": {"answer"}}  # a set: JSON cannot hold it
    with pytest.raises(ConfigurationError, match="result_schema"):

        class SetAgent(Agent):
            result_schema = schema


def test_a_pydantic_result_model_without_a_json_schema_fails_with_configuration_error():
    from collections.abc import Callable

    from pydantic import BaseModel, ConfigDict

    class Uncheckable(BaseModel):
        model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)
        compute: Callable[[], int]

    with pytest.raises(ConfigurationError, match="result_schema"):

        class CallableAgent(Agent):
            result_schema = Uncheckable


# -- RunResult#output follows the delivered structured result ----------------------------------------


def test_output_is_the_structured_value_an_after_invocation_callback_delivered(config, script):
    # The spec: after_invocation "Observes or transforms the terminal invocation payload";
    # RunResult#output "Uses the structured value when present and otherwise #text."
    corrected = StructuredResult(schema_name="answer", value={"answer": "43"})

    class CorrectingAgent(Agent):
        model = script([{"structured": {"answer": "42"}}])
        result_schema = ANSWER

        @after_invocation
        def correct(self, payload):
            return replace({"result": dataclasses.replace(payload["result"], structured_result=corrected)})

    run = CorrectingAgent.ask("Question")

    assert run.result.structured_result == corrected
    assert run.result.output == {"answer": "43"}
    assert run.refresh().result.output == {"answer": "43"}, "the same as the stored result gives"


# -- RunContext#checkpoint ---------------------------------------------------------------------------


def test_run_context_checkpoint_sends_messages_and_state_to_its_callback():
    # The spec: RunContext.new(..., checkpoint: nil, ...); "#checkpoint(messages) Sends
    # `messages` and current state to the configured checkpoint callback. With no
    # checkpoint callback, this method does nothing and returns `nil`."
    sent = []
    context = RunContext(
        state={"ticket": 7},
        checkpoint=lambda messages, state: sent.append((messages, dict(state))),
        interjection_metadata={"source": "web"},
        interjection_ids=["i-1"],
    )
    messages = [lg_core.Message(role="user", content="Hi")]

    assert context.checkpoint(messages) is None
    assert sent == [(messages, {"ticket": 7})]
    assert RunContext().checkpoint(messages) is None


# -- terminal-tool results and the conversation a session keeps --------------------------------------


def _unanswered(messages) -> set[str]:
    called = {b.id for m in messages for b in m.content if isinstance(b, ToolUse)}
    answered = {b.tool_use_id for m in messages for b in m.content if isinstance(b, ToolResult)}
    return called - answered


def test_a_result_submitted_through_the_result_tool_leaves_no_unanswered_call(config, script):
    """The run ends on the message calling submit_answer; its call (and any other call in that
    message, which does not run) gets a tool result, so the session's next run sends a
    conversation providers accept (every tool call answered)."""
    requests = []

    def serve(request):
        requests.append(request)
        return {
            "tool_calls": [
                {"name": "submit_answer", "arguments": {"answer": "42"}},
                {"name": "never_defined_here", "arguments": {}},
            ]
        }

    class ToolAnswerAgent(Agent):
        model = script(serve, capabilities=ModelCapabilities(tools=True))
        result_schema = ANSWER

    first = ToolAnswerAgent.ask("First", session_id="conv-1")
    assert first.completed and first.result.output == {"answer": "42"}
    assert first.result.message.tool_uses  # the result is still the submitting message
    last = first.result.messages[-1]
    assert last.role == "tool" and [(b.status, b.text) for b in last.content] == [
        ("success", "Result accepted."),
        ("error", "Not run: the run finished with the submitted result."),
    ]
    assert ToolAnswerAgent.ask("Second", session_id="conv-1").completed

    assert _unanswered(requests[-1].messages) == set()
    assert len(lg_core.current_runtime().session_store.load("conv-1").messages) == 6  # 2 x (user, assistant, tool)
