"""Stream parsing: ``chat.completion.chunk`` events as StreamEvents and one ModelResponse.

Chat Completions streams deltas: text pieces, tool-call fragments keyed by
``index`` (the first carries the call's id and name, later ones carry pieces
of its JSON arguments), a ``finish_reason``, and with ``include_usage`` a last
chunk with no choices and the usage. :class:`ChunkReader` folds them into the
same events the scripted provider yields, ending with ``message_stop``.
Another adapter's reader (OpenRouter's) subclasses it: it reads more of each
chunk in :meth:`ChunkReader.feed` and keeps more reasoning in
:meth:`ChunkReader.reasoning_block`.
"""

from __future__ import annotations

import dataclasses
import json
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
from lg_core.providers._http.stream import parse_object, token_count
from lg_core.providers.base import tool_use
from lg_core.usage import Usage

DONE = "[DONE]"
STOP_REASONS = {
    "stop": "end_turn",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "length": "max_tokens",
    "content_filter": "content_filter",
}


@dataclasses.dataclass
class _ToolCall:
    """One tool call being assembled from its fragments."""

    id: str
    id_given: bool = False  # the server named the call (else ``id`` is ours)
    name: str = ""
    arguments: list[str] = dataclasses.field(default_factory=list)
    started: bool = False

    def tool_use(self) -> ToolUse:
        if not self.name:
            raise MalformedToolCallError(f"the model sent tool call {self.id!r} without a function name")
        return tool_use(self.id, self.name, "".join(self.arguments))


class ChunkReader:
    """Folds the chunks of one response into StreamEvents and, at the end, the ModelResponse."""

    def __init__(self, target: str, sequence: int) -> None:
        self.target = target
        self.sequence = sequence
        self.text: list[str] = []
        self.reasoning: list[str] = []
        self.calls: dict[int, _ToolCall] = {}  # in order of arrival
        self._open: dict[int | None, int] = {}  # a fragment's ``index`` (None: absent) -> the call it continues
        self.finish_reason: str | None = None
        self.refused = False  # the model sent a refusal: declined, as Anthropic's "refusal" stop says
        self.error: Any = None  # the error object OpenRouter puts on a choice that finished with "error"
        self.usage: Usage | None = None
        self.metadata: dict[str, Any] = {"model": target}

    def feed(self, chunk: Mapping[str, Any]) -> Iterator[StreamEvent]:
        """The events one chunk adds."""
        if chunk.get("id") and "id" not in self.metadata:
            self.metadata["id"] = str(chunk["id"])
            self.metadata["provider_model"] = chunk.get("model")
        if isinstance(chunk.get("usage"), Mapping):
            self.usage = usage_from(chunk["usage"])
        for choice in chunk.get("choices") or ():
            if isinstance(choice, Mapping) and choice.get("index", 0) == 0:
                yield from self._choice(choice)

    def _choice(self, choice: Mapping[str, Any]) -> Iterator[StreamEvent]:
        delta = choice.get("delta") or {}
        pieces = [
            ("reasoning", delta.get("reasoning") or delta.get("reasoning_content")),
            *_content_pieces(delta.get("content")),
            ("text", delta.get("refusal")),  # a refusal is what the model said instead of an answer
        ]
        if isinstance(delta.get("refusal"), str) and delta["refusal"]:
            self.refused = True
        for kind, piece in pieces:
            if isinstance(piece, str) and piece:
                (self.reasoning if kind == "reasoning" else self.text).append(piece)
                yield StreamEvent.build(f"{kind}_delta", text=piece)
        for fragment in delta.get("tool_calls") or ():
            yield from self._tool_fragment(fragment)
        if choice.get("finish_reason"):
            self.finish_reason = str(choice["finish_reason"])
            self.error = choice.get("error")

    def _tool_fragment(self, fragment: Mapping[str, Any]) -> Iterator[StreamEvent]:
        call = self._call_for(fragment)
        function = fragment.get("function") or {}
        if function.get("name") and not call.name:
            call.name = str(function["name"])
        pieces = function.get("arguments")
        if isinstance(pieces, Mapping):  # an object instead of JSON text (TGI, some llama.cpp builds)
            pieces = json.dumps(pieces)
        if isinstance(pieces, str) and pieces:
            call.arguments.append(pieces)
        if not call.started and call.name:
            call.started = True
            yield StreamEvent.build("tool_call_start", id=call.id, name=call.name)
            pieces = "".join(call.arguments)  # fragments that came before the name
        if call.started and isinstance(pieces, str) and pieces:
            yield StreamEvent.build("tool_call_delta", id=call.id, arguments=pieces)

    def _call_for(self, fragment: Mapping[str, Any]) -> _ToolCall:
        """The call a fragment continues: the last one opened at its ``index``, unless the fragment
        starts another (a function name and a new id: Ollama numbers every call of a turn 0; an
        id change alone is not enough, some servers change it after the first fragment); servers
        that omit ``index`` send one call's fragments in a row."""
        index = fragment.get("index") if isinstance(fragment.get("index"), int) else None
        call_id = fragment.get("id")
        key = self._open.get(index)
        call = self.calls.get(key) if key is not None else None
        starts = bool(call_id and (fragment.get("function") or {}).get("name"))
        if call is None or (starts and call.id_given and call.id != str(call_id)):
            key = self._open[index] = len(self.calls)
            call = self.calls[key] = _ToolCall(id=str(call_id or f"call_{self.sequence}_{key}"), id_given=bool(call_id))
        return call

    @property
    def answered(self) -> bool:
        """Whether the model said anything an agent can act on: text (a refusal included) or a tool call."""
        return bool(self.text or self.calls)

    def finish(self) -> Iterator[StreamEvent]:
        """Report usage, close the tool calls, and end with ``message_stop`` carrying the response.

        Usage goes first: a tool call the checks below refuse still spent its tokens.
        """
        usage = self.usage or Usage()
        yield StreamEvent.build("usage", usage=usage)
        blocks: list[Any] = []
        reasoning = self.reasoning_block()
        if reasoning is not None:
            blocks.append(reasoning)
        if self.text:
            blocks.append(Text(text="".join(self.text)))
        for index in sorted(self.calls):
            use = self._tool_use(self.calls[index])
            if not self.calls[index].started:
                yield StreamEvent.build("tool_call_start", id=use.id, name=use.name)
            yield StreamEvent.build("tool_call_stop", id=use.id, name=use.name, input=use.input)
            blocks.append(use)
        stop_reason = self._stop_reason()
        self.metadata["finish_reason"] = self.finish_reason
        response = ModelResponse(
            message=Message(role="assistant", content=blocks),
            stop_reason=stop_reason,
            usage=usage,
            metadata=self.metadata,
        )
        yield StreamEvent.build("message_stop", stop_reason=stop_reason, response=response)

    def reasoning_block(self) -> Reasoning | None:
        """The response's reasoning, if any: the text of its reasoning deltas."""
        return Reasoning(text="".join(self.reasoning)) if self.reasoning else None

    def _tool_use(self, call: _ToolCall) -> ToolUse:
        """The finished call; one whose arguments the output limit cut off is an OutputLimitError,
        and one a stream without a finish reason cut off a retryable ProtocolError."""
        try:
            return call.tool_use()
        except MalformedToolCallError as exc:
            if self.finish_reason is None and not _is_json("".join(call.arguments)):
                # No finish reason and arguments that stop mid-JSON: the stream was cut inside the call
                # (a gateway that closed with [DONE] anyway). Asking again may get it whole.
                raise ProtocolError(
                    f"the stream ended without a finish_reason in the middle of tool call {call.name or call.id!r}",
                    retryable=True,
                ) from exc
            if self.finish_reason != "length":
                raise
            raise OutputLimitError(
                f"the model reached its output token limit while writing tool call {call.name or call.id!r}, "
                "so the call is incomplete; raise the max_tokens (or max_completion_tokens) setting"
            ) from exc

    def _stop_reason(self) -> str:
        if self.refused and not self.calls:
            return "content_filter"  # OpenAI finishes a refusal with "stop"; the anthropic adapter says the same
        if self.calls and self.finish_reason in (None, "stop", "tool_calls", "function_call"):
            return "tool_use"  # some compatible servers say "stop" after tool calls
        return STOP_REASONS.get(self.finish_reason or "", "other")


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
    except (ValueError, RecursionError):
        return False
    return True


def _content_pieces(content: Any) -> list[tuple[str, Any]]:
    """``delta.content`` as ``(kind, text)`` pairs: a string, or content parts (Mistral's magistral
    models stream ``thinking`` parts, whose ``thinking`` holds text parts, then ``text`` parts)."""
    if not isinstance(content, list):
        return [("text", content)]
    pieces: list[tuple[str, Any]] = []
    for part in content:
        if not isinstance(part, Mapping):
            continue
        if part.get("type") == "thinking":
            inner = part.get("thinking")
            texts = inner if isinstance(inner, list) else [{"text": inner}]
            pieces.extend(("reasoning", text.get("text")) for text in texts if isinstance(text, Mapping))
        elif part.get("type") == "text":
            pieces.append(("text", part.get("text")))
    return pieces


def usage_from(data: Mapping[str, Any]) -> Usage:
    """OpenAI's counts as the spec's separate fields: uncached input, cache reads and writes (OpenRouter's
    ``cache_write_tokens``), visible output, reasoning."""
    prompt_details = data.get("prompt_tokens_details") or {}
    cached, written = (
        token_count(prompt_details.get("cached_tokens")),
        token_count(prompt_details.get("cache_write_tokens")),
    )
    reasoning = token_count((data.get("completion_tokens_details") or {}).get("reasoning_tokens"))
    return Usage(
        input_tokens=max(token_count(data.get("prompt_tokens")) - cached - written, 0),
        output_tokens=max(token_count(data.get("completion_tokens")) - reasoning, 0),
        cache_read_tokens=cached,
        cache_write_tokens=written,
        reasoning_tokens=reasoning,
    )


def read_stream(
    events: Iterable[Any],
    reader: ChunkReader,
    *,
    interrupt: Callable[[], None],
    on_error: Callable[[ErrorReply], ProviderError],
    endpoint: str,
) -> Iterator[StreamEvent]:
    """The StreamEvents of an SSE stream (``events`` have ``.event`` and ``.data``),
    checking ``interrupt`` between chunks.

    The response ends at ``[DONE]``, or at the usage chunk that follows the finish reason:
    the request asks for usage (``stream_options.include_usage``), which OpenAI sends in
    the last chunk before ``[DONE]`` (compatible servers put it on the chunk with the
    finish reason). Reading stops there, without waiting for ``[DONE]`` or for the body
    to close, so a server that holds the connection open cannot turn a finished answer
    into a read timeout. Usage sent after the finish reason is still read.
    """
    done = False
    for sse in events:
        interrupt()
        data = sse.data
        if data.strip() == DONE:
            done = True
            break
        if sse.event == "error":  # DashScope names its error frames; their data need not be JSON
            raise on_error(ErrorReply(None, data))
        if not data.strip():
            continue
        chunk = parse_object(data, endpoint, "stream chunk")
        if _is_error(chunk):
            raise on_error(ErrorReply(None, data))
        yield from reader.feed(chunk)
        if reader.finish_reason == "error":  # the generation failed: no answer, whatever came before
            error = reader.error or {"message": 'the model stopped with finish_reason "error"'}
            raise on_error(ErrorReply(None, json.dumps({"error": error})))
        if reader.finish_reason is not None and _has_usage(chunk):
            done = True  # the last chunk the request asked for; [DONE] adds nothing
            break
    if not done and reader.finish_reason is None:
        raise HTTPError(f"the stream from {endpoint} ended before the response was complete", retryable=True)
    if reader.finish_reason is None and not reader.answered:
        # A generation that failed upstream (a gateway that lost its model, a crashed worker) can
        # still close with [DONE]: completing the turn as an empty answer would end the run on it.
        raise ProtocolError(
            f"the stream from {endpoint} ended without an answer: [DONE] came with no content, "
            "no tool call and no finish_reason",
            retryable=True,
        )
    interrupt()
    yield from reader.finish()


def _has_usage(chunk: Mapping[str, Any]) -> bool:
    """Whether ``chunk`` carries the usage (not the ``"usage": null`` of every other OpenAI chunk)."""
    usage = chunk.get("usage")
    return isinstance(usage, Mapping) and bool(usage)


def _is_error(chunk: Mapping[str, Any]) -> bool:
    """An error frame: an ``error`` object (OpenAI, OpenRouter; some gateways send ``"error": null`` on
    every chunk), or a top-level ``message`` where a chunk has ``choices`` (DashScope's ``{"code", "message"}``)."""
    if chunk.get("error"):
        return True
    return "choices" not in chunk and isinstance(chunk.get("message"), str) and bool(chunk["message"])


__all__ = ["ChunkReader", "read_stream", "usage_from"]
