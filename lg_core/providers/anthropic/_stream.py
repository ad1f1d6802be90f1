"""Stream parsing: Messages API stream events as StreamEvents and one ModelResponse.

A Messages stream is ``message_start`` (the message id, model and input usage),
then per content block a ``content_block_start``, its ``content_block_delta``
events (``text_delta``; ``input_json_delta`` pieces of a ``tool_use`` block's
JSON input; ``thinking_delta`` and ``signature_delta`` of extended thinking) and
a ``content_block_stop``; then ``message_delta`` (the ``stop_reason`` and the
output usage) and ``message_stop``. ``ping`` events may come anywhere, and an
``error`` event (``overloaded_error``) may end the stream instead.
:class:`EventReader` folds them into the same events the scripted provider
yields, ending with ``message_stop``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from lg_core.content import Reasoning, Text, ToolUse
from lg_core.errors import (
    HTTPError,
    MalformedToolCallError,
    OutputLimitError,
    ProtocolError,
    ProviderError,
)
from lg_core.events import StreamEvent
from lg_core.messages import Message
from lg_core.models.request import ModelResponse
from lg_core.providers._http.errors import ErrorReply
from lg_core.providers._http.stream import brief, parse_object, token_count
from lg_core.providers.base import tool_use
from lg_core.usage import Usage

STOP_REASONS = {
    "end_turn": "end_turn",
    "tool_use": "tool_use",
    "max_tokens": "max_tokens",
    "stop_sequence": "stop_sequence",
    "refusal": "content_filter",  # the model declined; what it said before is the answer
    "model_context_window_exceeded": "max_tokens",  # output cut off by the context window, not by max_tokens
    "pause_turn": "other",  # a server tool's long turn paused; we send no server tools
}
# The delta types each kind of block takes; other delta types (citations_delta) are ignored.
_DELTAS = {
    "text_delta": ("text",),
    "input_json_delta": ("tool_use",),
    "thinking_delta": ("thinking",),
    "signature_delta": ("thinking",),
}


@dataclasses.dataclass
class _Block:
    """One content block being assembled from its deltas."""

    kind: str  # text, tool_use, thinking, redacted_thinking, or another type we keep nothing of
    pieces: list[str] = dataclasses.field(default_factory=list)  # text, thinking or partial JSON
    signature: list[str] = dataclasses.field(default_factory=list)  # a thinking block's signature, in pieces
    id: str = ""
    name: str = ""
    start_input: Any = None  # a tool_use block's ``input`` as it started (``{}`` when deltas follow)
    data: str = ""  # a redacted_thinking block's opaque data
    stopped: bool = False


class EventReader:
    """Folds the events of one response into StreamEvents and, at the end, the ModelResponse."""

    def __init__(self, target: str, sequence: int, endpoint: str) -> None:
        self.target = target
        self.sequence = sequence
        self.endpoint = endpoint
        self.blocks: dict[int, _Block] = {}  # by the stream's block index
        self.usage: dict[str, Any] = {}
        self.stop_reason: str | None = None
        self.stopped = False  # message_stop arrived
        self.metadata: dict[str, Any] = {"model": target}

    def feed(self, event: Mapping[str, Any]) -> Iterator[StreamEvent]:
        """The events one stream event adds; ``ping`` and unknown types add none."""
        kind = event.get("type")
        if kind == "message_start":
            self._message_start(event.get("message"))
        elif kind == "content_block_start":
            yield from self._block_start(event)
        elif kind == "content_block_delta":
            yield from self._block_delta(event)
        elif kind == "content_block_stop":
            self._block(event).stopped = True
        elif kind == "message_delta":
            self._message_delta(event)
        elif kind == "message_stop":
            self.stopped = True

    def _message_start(self, message: Any) -> None:
        if not isinstance(message, Mapping):
            raise ProtocolError(f"{self.endpoint} sent message_start without a message object")
        if message.get("id"):
            self.metadata["id"] = str(message["id"])
        if message.get("model"):
            self.metadata["provider_model"] = str(message["model"])
        self._add_usage(message.get("usage"))

    def _block_start(self, event: Mapping[str, Any]) -> Iterator[StreamEvent]:
        index, start = event.get("index"), event.get("content_block")
        if not isinstance(index, int) or not isinstance(start, Mapping):
            raise ProtocolError(
                f"{self.endpoint} sent content_block_start without an index and a content_block: {brief(event)}"
            )
        if index in self.blocks:
            raise ProtocolError(f"{self.endpoint} started content block {index} twice")
        block = self.blocks[index] = _Block(kind=str(start.get("type")))
        if block.kind == "tool_use":
            block.id = str(start.get("id") or f"toolu_{self.sequence}_{index}")
            block.name = str(start.get("name") or "")
            block.start_input = start.get("input")
            if not block.name:
                raise MalformedToolCallError(f"the model sent tool call {block.id!r} without a tool name")
            yield StreamEvent.build("tool_call_start", id=block.id, name=block.name)
        elif block.kind == "redacted_thinking":
            block.data = str(start.get("data") or "")
        elif block.kind in ("text", "thinking"):
            block.signature.append(str(start.get("signature") or ""))
            yield from self._piece(block, start.get(block.kind))

    def _block_delta(self, event: Mapping[str, Any]) -> Iterator[StreamEvent]:
        block = self._block(event)
        delta = event.get("delta")
        if not isinstance(delta, Mapping):
            raise ProtocolError(f"{self.endpoint} sent content_block_delta without a delta object: {brief(event)}")
        kind = delta.get("type")
        if block.stopped:
            raise ProtocolError(f"{self.endpoint} sent a {kind} for content block {event['index']} after it stopped")
        if kind not in _DELTAS:
            return  # a delta this adapter has no use for (citations_delta), or a newer one
        if block.kind not in _DELTAS[kind]:
            raise ProtocolError(
                f"{self.endpoint} sent a {kind} for content block {event['index']}, a {block.kind} block"
            )
        if kind == "signature_delta":
            block.signature.append(str(delta.get("signature") or ""))
        elif kind == "input_json_delta":
            yield from self._json_piece(block, delta.get("partial_json"))
        else:
            yield from self._piece(block, delta.get(block.kind))

    def _piece(self, block: _Block, piece: Any) -> Iterator[StreamEvent]:
        if isinstance(piece, str) and piece:
            block.pieces.append(piece)
            yield StreamEvent.build("text_delta" if block.kind == "text" else "reasoning_delta", text=piece)

    def _json_piece(self, block: _Block, piece: Any) -> Iterator[StreamEvent]:
        if isinstance(piece, str) and piece:
            block.pieces.append(piece)
            yield StreamEvent.build("tool_call_delta", id=block.id, arguments=piece)

    def _block(self, event: Mapping[str, Any]) -> _Block:
        index = event.get("index")
        block = self.blocks.get(index) if isinstance(index, int) else None
        if block is None:
            raise ProtocolError(
                f"{self.endpoint} sent {event.get('type')} for content block {index!r}, which it never started"
            )
        return block

    def _message_delta(self, event: Mapping[str, Any]) -> None:
        delta = event.get("delta")
        if isinstance(delta, Mapping) and delta.get("stop_reason"):
            self.stop_reason = str(delta["stop_reason"])
            if delta.get("stop_sequence"):
                self.metadata["stop_sequence"] = str(delta["stop_sequence"])
        self._add_usage(event.get("usage"))

    def _add_usage(self, usage: Any) -> None:
        """Counts as they arrive: message_start's input, message_delta's (cumulative) output."""
        if isinstance(usage, Mapping):
            self.usage.update({key: value for key, value in usage.items() if value is not None})

    @property
    def answered(self) -> bool:
        """Whether the stream said how the message ended, or held anything an agent can act on."""
        return self.stop_reason is not None or any(
            block.pieces or block.kind == "tool_use" for block in self.blocks.values()
        )

    def finish(self) -> Iterator[StreamEvent]:
        """Report usage, close the tool calls, and end with ``message_stop`` carrying the response.

        Usage goes first: a tool call the checks below refuse still spent its tokens.
        """
        usage = usage_from(self.usage)
        yield StreamEvent.build("usage", usage=usage)
        blocks: list[Any] = []
        for index in sorted(self.blocks):
            block = self.blocks[index]
            content = self._content(block)
            if isinstance(content, ToolUse):
                yield StreamEvent.build("tool_call_stop", id=content.id, name=content.name, input=content.input)
            if content is not None:
                blocks.append(content)
        stop_reason = self._stop_reason(blocks)
        self.metadata["provider_stop_reason"] = self.stop_reason
        response = ModelResponse(
            message=Message(role="assistant", content=blocks),
            stop_reason=stop_reason,
            usage=usage,
            metadata=self.metadata,
        )
        yield StreamEvent.build("message_stop", stop_reason=stop_reason, response=response)

    def _content(self, block: _Block) -> Any:
        """The content block ``block`` became; None for an empty text block or a kind we keep nothing of."""
        text = "".join(block.pieces)
        if block.kind == "text":
            return Text(text=text) if text else None
        if block.kind == "thinking":
            return Reasoning(text=text, signature="".join(block.signature) or None)
        if block.kind == "redacted_thinking":
            return Reasoning(redacted_content=block.data.encode("utf-8"))
        if block.kind == "tool_use":
            return self._tool_use(block, text)
        return None

    def _tool_use(self, block: _Block, arguments: str) -> ToolUse:
        """The finished call; one whose input the output limit cut off is an OutputLimitError."""
        try:
            return tool_use(block.id, block.name, arguments if block.pieces else block.start_input or {})
        except MalformedToolCallError as exc:
            if self.stop_reason not in ("max_tokens", "model_context_window_exceeded"):
                raise
            raise OutputLimitError(
                f"the model reached its output token limit while writing tool call {block.name!r}, "
                "so the call is incomplete; raise the max_tokens setting"
            ) from exc

    def _stop_reason(self, blocks: list[Any]) -> str:
        if self.stop_reason is None:
            return "tool_use" if any(isinstance(block, ToolUse) for block in blocks) else "end_turn"
        return STOP_REASONS.get(self.stop_reason, "other")


def usage_from(data: Mapping[str, Any]) -> Usage:
    """Anthropic's counts are already separate: ``input_tokens`` excludes the cached prompt, which
    ``cache_read_input_tokens`` (read) and ``cache_creation_input_tokens`` (written) count;
    ``output_tokens`` includes thinking, which is not counted apart."""
    return Usage(
        input_tokens=token_count(data.get("input_tokens")),
        output_tokens=token_count(data.get("output_tokens")),
        cache_read_tokens=token_count(data.get("cache_read_input_tokens")),
        cache_write_tokens=token_count(data.get("cache_creation_input_tokens")),
    )


def read_stream(
    events: Iterable[Any],
    reader: EventReader,
    *,
    interrupt: Callable[[], None],
    on_error: Callable[[ErrorReply], ProviderError],
) -> Iterator[StreamEvent]:
    """The StreamEvents of an SSE stream (``events`` have ``.event`` and ``.data``),
    checking ``interrupt`` between events.

    ``message_stop`` ends the response, as ``[DONE]`` ends a Chat Completions stream:
    reading stops there, without waiting for the server to close the body. A proxy
    that holds the connection open after it (or keeps sending pings) would
    otherwise make a finished answer wait for the read timeout, and then lose it
    as a timeout to be retried.
    """
    endpoint = reader.endpoint
    for sse in events:
        interrupt()
        if sse.event == "error":  # its data is the error object; a proxy may send plain text instead
            raise on_error(ErrorReply(None, sse.data))
        if not sse.data.strip():
            continue
        event = parse_object(sse.data, endpoint, "stream event")
        if event.get("type") == "error":
            raise on_error(ErrorReply(None, sse.data))
        yield from reader.feed(event)
        if reader.stopped:
            break
    if not reader.stopped:
        raise HTTPError(
            f"the stream from {endpoint} ended before the response was complete (no message_stop)", retryable=True
        )
    if not reader.answered:
        raise ProtocolError(
            f"the stream from {endpoint} ended without an answer: message_stop came with no content and no stop_reason",
            retryable=True,
        )
    interrupt()
    yield from reader.finish()


__all__ = ["EventReader", "STOP_REASONS", "read_stream", "usage_from"]
