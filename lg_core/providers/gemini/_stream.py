"""Stream parsing: ``streamGenerateContent?alt=sse`` chunks as StreamEvents and one ModelResponse.

Each SSE event's data is a whole ``GenerateContentResponse``: ``candidates[0].content.parts``
holds the parts that chunk adds (a piece of text, a piece of a thought summary with
``thought: true``, or a whole ``functionCall``), ``usageMetadata`` the counts so far,
and the last chunk the candidate's ``finishReason``. There is no end marker: the
server closes the body after the chunk with the finish reason. A blocked prompt comes
as ``promptFeedback.blockReason`` with no candidate, and an error as an ``{"error": ...}``
chunk. :class:`ChunkReader` folds the chunks into the same events the scripted provider
yields, ending with ``message_stop``.

Consecutive text parts (and thought parts) become one block, except that a part with
a thought signature stands alone, so that the signature goes back on exactly the part
it came on (see :mod:`._signatures`).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from lg_core.content import Reasoning, Text, ToolUse
from lg_core.errors import HTTPError, MalformedToolCallError, ProtocolError, ProviderError
from lg_core.events import StreamEvent
from lg_core.messages import Message
from lg_core.models.request import ModelResponse
from lg_core.providers._http.errors import ErrorReply
from lg_core.providers._http.stream import brief, parse_object, token_count
from lg_core.providers.base import tool_use
from lg_core.providers.gemini._signatures import Part, Signature, generated_id
from lg_core.usage import Usage

FILTERED = frozenset(
    {
        "SAFETY",
        "RECITATION",
        "LANGUAGE",
        "BLOCKLIST",
        "PROHIBITED_CONTENT",
        "SPII",
        "IMAGE_SAFETY",
        "IMAGE_PROHIBITED_CONTENT",
        "IMAGE_RECITATION",
    }
)
# The model produced a call Gemini could not parse or did not allow: a fresh try usually succeeds.
BAD_CALLS = frozenset({"MALFORMED_FUNCTION_CALL", "UNEXPECTED_TOOL_CALL", "TOO_MANY_TOOL_CALLS"})


@dataclasses.dataclass
class _Block:
    """One content block being assembled: text, thought, functionCall, or a signature (see ``_signatures``)."""

    kind: str
    pieces: list[str] = dataclasses.field(default_factory=list)
    closed: bool = False  # a signed part: the next part starts a new block
    call: ToolUse | None = None
    signature: Signature | None = None


class ChunkReader:
    """Folds the chunks of one response into StreamEvents and, at the end, the ModelResponse."""

    def __init__(self, target: str, sequence: int, endpoint: str) -> None:
        self.target = target
        self.sequence = sequence
        self.endpoint = endpoint
        self.blocks: list[_Block] = []
        self.usage: Mapping[str, Any] = {}
        self.finish_reason: str | None = None
        self.unnamed_calls = 0  # calls that came without an id, for generated ids
        self.metadata: dict[str, Any] = {"model": target}

    def feed(self, chunk: Mapping[str, Any]) -> Iterator[StreamEvent]:
        """The events one chunk adds."""
        self._blocked(chunk.get("promptFeedback"))
        if isinstance(chunk.get("usageMetadata"), Mapping):
            self.usage = chunk["usageMetadata"]  # counts so far: the last chunk's are the totals
        for key, name in (("responseId", "id"), ("modelVersion", "provider_model")):
            if chunk.get(key):
                self.metadata[name] = str(chunk[key])
        candidate = self._candidate(chunk.get("candidates"))
        if candidate is None:
            return
        content = candidate.get("content")
        parts = content.get("parts") if isinstance(content, Mapping) else None
        if parts is not None and not isinstance(parts, list):
            raise ProtocolError(f"{self.endpoint} sent a candidate whose content.parts is not a list: {brief(chunk)}")
        for part in parts or ():
            yield from self._part(part)
        if candidate.get("finishReason"):
            self.finish_reason = str(candidate["finishReason"])
            if candidate.get("finishMessage"):
                self.metadata["finish_message"] = str(candidate["finishMessage"])

    def _blocked(self, feedback: Any) -> None:
        """A prompt Gemini refused to answer: the same input would be refused again."""
        if isinstance(feedback, Mapping) and feedback.get("blockReason"):
            reason = str(feedback["blockReason"])
            raise ProviderError(
                f"{self.endpoint} blocked the prompt ({reason}) and did not answer; change the input, "
                "or the connection's safetySettings setting if the block is a false positive",
                retryable=False,
                error_type=reason,
            )

    def _candidate(self, candidates: Any) -> Mapping[str, Any] | None:
        if candidates is None or candidates == []:
            return None  # a chunk with usage only
        if not isinstance(candidates, list) or not isinstance(candidates[0], Mapping):
            raise ProtocolError(f"{self.endpoint} sent candidates that are not a list of objects: {brief(candidates)}")
        return candidates[0]

    def _part(self, part: Any) -> Iterator[StreamEvent]:
        if not isinstance(part, Mapping):
            raise ProtocolError(f"{self.endpoint} sent a content part that is not a JSON object: {brief(part)}")
        kind = _kind(part)
        signature = part.get("thoughtSignature")
        if isinstance(signature, str) and signature:
            self.blocks.append(_Block("signature", signature=Signature(signature, kind or "text")))
        if kind == "functionCall":
            yield from self._call(part["functionCall"])
        elif kind is not None:
            yield from self._text(kind, part.get("text"), signed=bool(signature))
        # other parts (executableCode, inlineData ...) answer nothing an agent loop acts on

    def _text(self, kind: str, text: Any, *, signed: bool) -> Iterator[StreamEvent]:
        if not isinstance(text, str):
            raise ProtocolError(f"{self.endpoint} sent a {kind} part whose text is not a string: {brief(text)}")
        last = self.blocks[-1] if self.blocks else None
        if last is None or last.kind != kind or last.closed:
            last = _Block(kind)
            self.blocks.append(last)
        last.closed = signed
        if text:
            last.pieces.append(text)
            yield StreamEvent.build("text_delta" if kind == "text" else "reasoning_delta", text=text)

    def _call(self, call: Any) -> Iterator[StreamEvent]:
        """A whole function call: Gemini never splits one across chunks."""
        if not isinstance(call, Mapping):
            raise ProtocolError(f"{self.endpoint} sent a functionCall that is not a JSON object: {brief(call)}")
        name = call.get("name")
        if not isinstance(name, str) or not name:
            raise MalformedToolCallError(f"the model sent a function call without a name: {brief(call)}")
        call_id = call.get("id")
        if not isinstance(call_id, str) or not call_id:
            call_id = generated_id(self.sequence, self.unnamed_calls)
            self.unnamed_calls += 1
        arguments = call.get("args")
        use = tool_use(call_id, name, {} if arguments is None else arguments)
        self.blocks.append(_Block("functionCall", call=use))
        yield StreamEvent.build("tool_call_start", id=use.id, name=use.name)
        yield StreamEvent.build(
            "tool_call_delta", id=use.id, arguments=json.dumps(use.input, separators=(",", ":"), ensure_ascii=False)
        )

    def finish(self) -> Iterator[StreamEvent]:
        """Report usage, close the tool calls, and end with ``message_stop`` carrying the response.

        Usage goes first: a function call the checks below refuse still spent its tokens.
        """
        usage = usage_from(self.usage)
        yield StreamEvent.build("usage", usage=usage)
        content: list[Any] = []
        for block in self.blocks:
            if block.call is not None:
                yield StreamEvent.build(
                    "tool_call_stop", id=block.call.id, name=block.call.name, input=block.call.input
                )
            item = _content(block)
            if item is not None:
                content.append(item)
        stop_reason = self._stop_reason(content)
        self.metadata["provider_stop_reason"] = self.finish_reason
        response = ModelResponse(
            message=Message(role="assistant", content=content),
            stop_reason=stop_reason,
            usage=usage,
            metadata=self.metadata,
        )
        yield StreamEvent.build("message_stop", stop_reason=stop_reason, response=response)

    def _stop_reason(self, content: list[Any]) -> str:
        reason = self.finish_reason
        if reason in BAD_CALLS:
            detail = self.metadata.get("finish_message") or "no detail given"
            raise MalformedToolCallError(
                f"{self.endpoint} rejected the model's function call ({reason}): {detail}", retryable=True
            )
        if reason == "STOP":
            if not any(isinstance(item, (Text, ToolUse)) for item in content):
                raise ProtocolError(
                    f"the stream from {self.endpoint} ended without an answer: "
                    "finishReason STOP with no text and no function call",
                    retryable=True,
                )
            return "tool_use" if any(isinstance(item, ToolUse) for item in content) else "end_turn"
        if reason == "MAX_TOKENS":
            return "max_tokens"
        if reason in FILTERED:
            return "content_filter"
        return "other"  # OTHER, FINISH_REASON_UNSPECIFIED, MALFORMED_RESPONSE, or a newer reason


def _kind(part: Mapping[str, Any]) -> Part | None:
    """``functionCall``, ``thought`` or ``text``; None for a part no agent loop acts on (code, media)."""
    if "functionCall" in part:
        return "functionCall"
    if "text" in part:
        return "thought" if part.get("thought") else "text"
    return None


def _content(block: _Block) -> Any:
    """The content block ``block`` became; None for an empty text or thought."""
    text = "".join(block.pieces)
    if block.signature is not None:
        return block.signature.block()
    if block.call is not None:
        return block.call
    if not text:
        return None
    return Text(text=text) if block.kind == "text" else Reasoning(text=text)


def usage_from(data: Mapping[str, Any]) -> Usage:
    """Gemini's counts as the spec's separate fields: ``promptTokenCount`` includes the cached
    ``cachedContentTokenCount`` (and tool-use prompts count as input); ``candidatesTokenCount``
    is the visible output and ``thoughtsTokenCount`` the thinking, counted apart."""
    cached = token_count(data.get("cachedContentTokenCount"))
    prompt = token_count(data.get("promptTokenCount")) + token_count(data.get("toolUsePromptTokenCount"))
    return Usage(
        input_tokens=max(prompt - cached, 0),
        output_tokens=token_count(data.get("candidatesTokenCount")),
        cache_read_tokens=cached,
        reasoning_tokens=token_count(data.get("thoughtsTokenCount")),
    )


def read_stream(
    events: Iterable[Any],
    reader: ChunkReader,
    *,
    interrupt: Callable[[], None],
    on_error: Callable[[ErrorReply], ProviderError],
) -> Iterator[StreamEvent]:
    """The StreamEvents of an SSE stream (``events`` have ``.data``), checking ``interrupt`` between chunks.

    Unlike Anthropic's ``message_stop`` and OpenAI's ``[DONE]``, the format has no end
    marker: only the body's end says that nothing follows. A ``finishReason`` is not one,
    since gateways translating other APIs into this one send it on more than the last
    chunk (and usage after it), so reading goes on until the server closes the body.
    """
    endpoint = reader.endpoint
    for sse in events:
        interrupt()
        if not sse.data.strip():
            continue
        chunk = parse_object(sse.data, endpoint, "stream chunk")
        if "error" in chunk:
            raise on_error(ErrorReply(None, sse.data))
        yield from reader.feed(chunk)
    if reader.finish_reason is None:
        raise HTTPError(
            f"the stream from {endpoint} ended before the response was complete (no finishReason)", retryable=True
        )
    interrupt()
    yield from reader.finish()


__all__ = ["BAD_CALLS", "ChunkReader", "FILTERED", "read_stream", "usage_from"]
