"""Spec conformance of events, limits, errors and the Tool API."""

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


# -- ToolRegistry#register ----------------------------------------------------------------------


def _closing_tool(name: str, closed: list[str]) -> type[Tool]:
    def close(self) -> None:
        closed.append(f"{name}#{id(self) % 1000}")

    return Tool.define(name=name, description=f"The {name} tool.", implementation=lambda input: name, close=close)


def test_register_adds_a_tool_and_returns_the_registry():
    from lg_core import ToolRegistry

    registry = ToolRegistry([TopicTool])

    assert registry.register(_closing_tool("extra", [])) is registry
    assert registry.names == ["topic", "extra"]
    assert registry.fetch("extra").tool_name == "extra"


def test_register_refuses_a_duplicate_name_without_replace_and_keeps_the_registry_unchanged():
    from lg_core import ConfigurationError, ToolRegistry

    closed: list[str] = []
    registry = ToolRegistry([TopicTool])
    first = registry.fetch("topic")

    with pytest.raises(ConfigurationError, match="replace=True"):
        registry.register([_closing_tool("new_one", closed), type("TopicTool", (TopicTool,), {})])

    assert registry.names == ["topic"]
    assert registry.fetch("topic") is first
    assert len(closed) == 1  # the tool built for the refused entries is closed at once


def test_register_with_replace_closes_the_replaced_owned_tool_after_validating_the_new_entries():
    from lg_core import ConfigurationError, ToolRegistry

    closed: list[str] = []
    old = _closing_tool("lookup", closed)
    registry = ToolRegistry([old])
    replaced = registry.fetch("lookup")

    with pytest.raises(ConfigurationError):  # an invalid entry: nothing is replaced or closed
        registry.register([_closing_tool("lookup", []), object()], replace=True)
    assert registry.fetch("lookup") is replaced and closed == []

    registry.register(_closing_tool("lookup", []), replace=True)

    assert registry.fetch("lookup") is not replaced
    assert closed == [f"lookup#{id(replaced) % 1000}"]
    registry.close()
    assert len(closed) == 1  # the replaced tool is closed once, not again with the registry


def test_register_after_close_raises():
    from lg_core import Error, ToolRegistry

    registry = ToolRegistry([TopicTool])
    registry.close()

    with pytest.raises(Error, match="closed"):
        registry.register(_closing_tool("late", []))


# -- Agent#max_tool_calls -----------------------------------------------------------------------


def test_a_run_scoped_agent_exposes_its_max_tool_calls(config, script):
    # The spec's Agent attribute max_tool_calls: "Maximum Tool calls allowed during one invocation."
    from lg_core import before_model

    seen: list[int] = []

    class LimitedAgent(Agent):
        model = script([{"text": "Hi."}])
        limits = {"max_tool_calls": 7}

        @before_model
        def note(self, payload):
            seen.append(self.max_tool_calls)

    assert LimitedAgent.ask("Hello").outcome == "completed"
    assert seen == [7]


# -- Tool.exclusive ------------------------------------------------------------------------------


@pytest.mark.parametrize("attribute", ["exclusive", "at_most_once"])
@pytest.mark.parametrize("value", ["false", 1, None])
def test_exclusive_and_at_most_once_must_be_booleans(attribute, value):
    # The spec: exclusive() -> true or false, "whether calls acquire the run-wide
    # exclusive tool lock"; a string "false" would silently mean True.
    from lg_core import ConfigurationError

    with pytest.raises(ConfigurationError, match=attribute):
        type("FlagTool", (Tool,), {"description": "d", attribute: value, "call": lambda self, input: None})


def test_exclusive_true_is_reported_by_the_instance():
    class DraftTool(Tool):
        description = "Replace a draft section."
        exclusive = True

        def call(self, input):
            return "ok"

    assert DraftTool().exclusive is True
    assert TopicTool().exclusive is False


# -- Providers::HTTPError -----------------------------------------------------------------------


def test_http_error_has_a_bounded_body_and_lives_in_the_providers_namespace():
    # The spec: LittleGhost::Providers::HTTPError.new(message, status: nil, body: nil)
    # "captures a provider failure without retaining an unbounded response".
    import pickle

    from lg_core import HTTPError, ProviderError, providers

    assert providers.HTTPError is HTTPError
    assert issubclass(providers.HTTPError, ProviderError)
    assert HTTPError("unreachable").body is None
    assert HTTPError("unreachable").status is None

    huge = HTTPError("bad gateway", status=502, body="x" * 1_000_000)
    assert len(huge.body) == providers.MAX_ERROR_BODY_CHARS
    assert huge.body.startswith("xxx")
    assert len(HTTPError("b", body=b"y" * 1_000_000).body) == providers.MAX_ERROR_BODY_CHARS
    assert HTTPError("short", body='{"error": "slow down"}').body == '{"error": "slow down"}'

    copied = pickle.loads(pickle.dumps(huge))
    assert (copied.status, copied.body) == (502, huge.body)
