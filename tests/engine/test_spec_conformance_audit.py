"""Spec-conformance checks found by the events, limits, errors and Tool API audit."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from lg_core import Agent, ModelCapabilities, StreamEvent, Tool
from lg_core.errors import MalformedToolCallError, ProtocolError
from lg_core.models.request import ModelRequest
from lg_core.providers import Provider


class EndlessTextProvider(Provider):
    """A provider whose stream ends without ``message_stop`` (a dropped connection's shape)."""

    adapter = "endless"

    def capabilities(self, model_id: str) -> ModelCapabilities:
        return ModelCapabilities(tools=True)

    def stream(self, request: ModelRequest, model_id: str) -> Iterator[StreamEvent]:
        yield StreamEvent.build("message_start", model=f"endless:{model_id}")
        yield StreamEvent.build("text_delta", text="Half an ans")


def test_a_stream_without_message_stop_fails_the_run_with_protocol_error_not_malformed_tool_call(config):
    # The spec: ProtocolError is "raised when a provider violates the expected
    # request-response protocol"; MalformedToolCallError is only for "an invalid
    # tool-call representation", and this stream has no tool call at all.
    config.runtime().resolver.adapters["endless"] = EndlessTextProvider
    config.runtime().resolver.connections["endless"] = {"adapter": "endless"}

    class CutOffAgent(Agent):
        model = "endless:m"

    run = CutOffAgent.ask("Hello")

    assert run.outcome == "failed"
    assert type(run.error) is ProtocolError
    assert not isinstance(run.error, MalformedToolCallError)
    assert "message_stop" in str(run.error)


# -- Tool.input_schema and Tool.specification are frozen -------------------------------------


class TopicTool(Tool):
    description = "Look up a topic."
    input_schema = {
        "type": "object",
        "properties": {"topic": {"type": "string"}},
        "required": ["topic"],
        "additionalProperties": False,
    }

    def call(self, input):
        return input["topic"]


def test_the_specification_schema_cannot_be_changed_to_alter_validation():
    # The spec: .specification is "the frozen model-facing name, description, and
    # input schema"; a callback editing a request's tool schema must not change
    # what every later call of the tool accepts.
    schema = TopicTool.specification().input_schema
    with pytest.raises(TypeError):
        schema["properties"]["topic"]["type"] = "integer"  # type: ignore[index]
    with pytest.raises((TypeError, AttributeError)):
        schema["required"].append("other")  # type: ignore[union-attr]

    assert TopicTool().validate({"topic": "refunds"}) == []


def test_input_schema_is_the_normalized_deeply_frozen_schema():
    # The spec: "Keys are normalized to strings and the entire value is deeply frozen."
    class NumberedTool(Tool):
        description = "d"
        input_schema = {"type": "object", "properties": {"n": {"type": "integer"}}}

        def call(self, input):
            return input["n"]

    with pytest.raises(TypeError):
        NumberedTool.input_schema["properties"]["n"] = {}
    assert NumberedTool().input_schema == {"type": "object", "properties": {"n": {"type": "integer"}}}
    assert NumberedTool.specification().input_schema is NumberedTool.input_schema


def test_a_frozen_specification_still_serializes_to_plain_json():
    import json

    spec = TopicTool.specification().to_dict()

    assert json.loads(json.dumps(spec))["input_schema"]["required"] == ["topic"]
