"""Spec-conformance checks found by the events, limits, errors and Tool API audit."""

from __future__ import annotations

from collections.abc import Iterator

from lg_core import Agent, ModelCapabilities, StreamEvent
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

