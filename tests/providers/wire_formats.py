"""Each HTTP adapter's wire format, as the conformance suite (``test_http_conformance``) asks for it.

The suite runs the same scenarios against every adapter, as the stores' suite
runs against every store: an answer, a tool call, an error status, an error in
the middle of a stream, a stream that stalls, drops or ends early. A
:class:`WireFormat` builds each of these in one provider's format with that
provider's test server (``anthropic_server``, ``gemini_server``, ...), and
states what the checks must know of the adapter: how the key is sent, where a
request goes by default, how the provider words an error.

Events are the server modules' (dicts, or bytes sent as they are); a reply is
built from them by the format's :class:`~tests.providers.sse_server.Framing`.
"""

from __future__ import annotations

import abc
import dataclasses
import json
from collections.abc import Iterator, Mapping
from typing import Any, ClassVar

from lg_core.providers import AnthropicProvider, GeminiProvider, OpenAIProvider, OpenRouterProvider
from lg_core.providers._http.provider import StreamingProvider
from tests.providers import anthropic_server, gemini_server, openai_server, openrouter_server
from tests.providers.sse_server import FakeServer, Framing, Reply

KEY = "sk-test-Zq7t0psecret"  # the suite's API key: the refusals quote it, and no error may show it
MODEL_ID = "test-model"  # the model the suite's agents name


@dataclasses.dataclass(frozen=True)
class Refusal:
    """An error status a provider refuses a request with: the status, the provider's name for the error
    (its type or code, None where it sends none), its message (quoting the key where the provider echoes
    it), and the advice the adapter adds to the error, when the check looks for it."""

    status: int
    kind: str | None
    message: str
    advice: str | None = None


def halves(arguments: Mapping[str, Any]) -> list[str]:
    """A tool call's JSON arguments in two pieces, as a streaming API sends them."""
    text = json.dumps(arguments)
    return [text[:10], text[10:]]


class WireFormat(abc.ABC):
    """One adapter's format; a subclass per adapter (see the module docstring)."""

    adapter: ClassVar[str]
    provider_class: ClassVar[type[StreamingProvider]]
    framing: ClassVar[Framing]
    default_base_url: ClassVar[str]  # the base URL of a connection that names none
    default_url: ClassVar[str]  # where a connection without base_url sends a request for MODEL_ID
    key_variable: ClassVar[str]  # the environment variable the adapter names when it has no key
    no_key_says: ClassVar[str]  # what the CredentialError of a connection without any key says
    own_option: ClassVar[str]  # an option only this adapter takes: listed when an unknown one is refused
    incomplete_says: ClassVar[str]  # what the error of a stream that ended early says
    first_piece_at: ClassVar[int]  # how many events of ``text(...)`` come up to and with its first piece
    # The kind (type, status or code) the provider's error answer names a status by, which the adapter quotes
    # in the message; ``keeps_error_type``: whether the adapter keeps it as the HTTPError's ``error_type``.
    kinds: ClassVar[Mapping[int, str]] = {}
    keeps_error_type: ClassVar[bool] = False
    # The kinds of ``error_event(transient=True)`` and of ``error_event(transient=False)``, None where the
    # provider's error frame names none the adapter keeps.
    event_kinds: ClassVar[tuple[str | None, str | None]] = (None, None)
    error_facts: ClassVar[Mapping[str, Any]] = {}  # what else an HTTPError keeps of every error answer
    response_metadata: ClassVar[Mapping[str, Any]]  # what the response of ``text(...)`` says of itself
    refusals: ClassVar[tuple[Refusal, ...]]  # requests refused for good: every one fails the run at once
    overflow: ClassVar[Refusal]  # a prompt longer than the context window, in the provider's words

    def __repr__(self) -> str:
        return f"<{self.adapter} wire format>"

    @abc.abstractmethod
    def serve(self) -> Iterator[FakeServer]:
        """The provider's local test server, for a fixture."""

    @abc.abstractmethod
    def sent_key(self, headers: Mapping[str, str]) -> str | None:
        """The API key as a request's ``headers`` carry it."""

    # -- answers (lists of events) ---------------------------------------------------------------------

    @abc.abstractmethod
    def text(self, *pieces: str, usage: tuple[int, int] = (12, 9)) -> list[Any]:
        """A whole streamed text answer, one piece per delta, with ``usage`` as (input, output) tokens."""

    @abc.abstractmethod
    def partial(self, *pieces: str) -> list[Any]:
        """The start of a text answer, up to and with ``pieces``: no end, no finish reason."""

    @abc.abstractmethod
    def filtered(self, *pieces: str) -> list[Any]:
        """A text answer the provider's content filter stopped after ``pieces``."""

    @abc.abstractmethod
    def empty(self) -> list[Any]:
        """A stream that ends in good order without an answer: no text, no tool call, no stop reason."""

    @abc.abstractmethod
    def tool_call(self, call_id: str, name: str, arguments: Mapping[str, Any]) -> list[Any]:
        """An answer that calls one tool."""

    @abc.abstractmethod
    def malformed_tool_call(self, name: str) -> list[Any]:
        """An answer that calls ``name`` with arguments that are no JSON object."""

    def cut_tool_call(self, name: str) -> list[Any] | None:
        """An answer whose call of ``name`` the output limit cut off; None where the provider sends every call whole."""
        return None

    @abc.abstractmethod
    def reasoning_cut_off(self, *pieces: str) -> list[Any]:
        """An answer the output limit stopped while the model was still reasoning (``pieces``):
        no text, no tool call."""

    @abc.abstractmethod
    def text_cut_off(self, *pieces: str) -> list[Any]:
        """A text answer the output limit stopped after ``pieces``."""

    @abc.abstractmethod
    def not_json(self) -> bytes:
        """An event frame whose data is broken JSON."""

    # -- errors ----------------------------------------------------------------------------------------

    @abc.abstractmethod
    def error(self, status: int, message: str, *, kind: str | None = None, retry_after: str | None = None) -> Reply:
        """The provider's error answer with ``status``: ``kind`` (else the provider's usual one for the status),
        and a ``Retry-After`` header when ``retry_after`` is given."""

    @abc.abstractmethod
    def error_event(self, message: str, *, transient: bool) -> Any:
        """An error sent mid-stream, of a kind worth retrying when ``transient``."""

    @abc.abstractmethod
    def error_body(self, message: str) -> Any:
        """An error as a JSON body, as a proxy that answers a streaming request with one passes it on."""

    def refused(self, refusal: Refusal) -> Reply:
        return self.error(refusal.status, refusal.message, kind=refusal.kind)

    def error_type(self, status: int, kind: str | None = None) -> str | None:
        """The ``error_type`` of the HTTPError for ``error(status, ..., kind=kind)``."""
        return (kind or self.kinds.get(status)) if self.keeps_error_type else None

    # -- replies (the framing's) -----------------------------------------------------------------------

    def stream(self, events: list[Any], **options: Any) -> Reply:
        return self.framing.stream(events, **options)

    def keep_alive(self, events: list[Any], **options: Any) -> Reply:
        return self.framing.keep_alive(events, **options)

    def stall_headers(self, events: list[Any], **options: Any) -> Reply:
        return self.framing.stall_headers(events, **options)

    def drop_after(self, events: list[Any]) -> Reply:
        return self.framing.drop_after(events)


class AnthropicFormat(WireFormat):
    """Anthropic's Messages stream (``anthropic_server``)."""

    adapter = "anthropic"
    default_base_url = "https://api.anthropic.com"
    provider_class = AnthropicProvider
    framing = anthropic_server.FRAMING
    default_url = f"{default_base_url}/v1/messages"
    key_variable = "ANTHROPIC_API_KEY"
    no_key_says = "api_key_env: ANTHROPIC_API_KEY"
    own_option = "api_version"
    incomplete_says = "ended before the response was complete (no message_stop)"
    first_piece_at = 4  # message_start, a ping, content_block_start, the first delta
    keeps_error_type = True
    event_kinds = ("overloaded_error", "invalid_request_error")
    error_facts = {"request_id": anthropic_server.REQUEST_ID}
    response_metadata = {"id": anthropic_server.MESSAGE_ID, "provider_model": anthropic_server.MODEL}
    refusals = (
        Refusal(400, "invalid_request_error", "messages.0.content: Input should be a valid list"),
        Refusal(401, "authentication_error", f"invalid x-api-key: {KEY}"),
        Refusal(403, "permission_error", "Your API key does not have permission to use the specified resource."),
        Refusal(404, "not_found_error", "model: claude-sonnet-4-6-typo"),
    )
    overflow = Refusal(400, "invalid_request_error", "prompt is too long: 208310 tokens > 200000 maximum")
    kinds = {
        400: "invalid_request_error",
        401: "authentication_error",
        403: "permission_error",
        404: "not_found_error",
        429: "rate_limit_error",
        500: "api_error",
        503: "api_error",
        529: "overloaded_error",
    }

    def serve(self) -> Iterator[FakeServer]:
        return anthropic_server.serve()

    def sent_key(self, headers: Mapping[str, str]) -> str | None:
        return headers.get("x-api-key")

    def text(self, *pieces: str, usage: tuple[int, int] = (25, 15)) -> list[Any]:
        return anthropic_server.text_message(*pieces, usage=usage)

    def partial(self, *pieces: str) -> list[Any]:
        return anthropic_server.text_message(*pieces)[: 3 + len(pieces)]

    def filtered(self, *pieces: str) -> list[Any]:
        return anthropic_server.message(anthropic_server.text_block(0, *pieces), stop_reason="refusal")

    def empty(self) -> list[Any]:
        return [anthropic_server.message_start(), anthropic_server.MESSAGE_STOP]

    def tool_call(self, call_id: str, name: str, arguments: Mapping[str, Any]) -> list[Any]:
        return anthropic_server.tool_message((call_id, name, halves(arguments)))

    def malformed_tool_call(self, name: str) -> list[Any]:
        return anthropic_server.tool_message(("toolu_1", name, ['{"topic": ', "refunds}"]))

    def cut_tool_call(self, name: str) -> list[Any]:
        """``stop_reason: max_tokens`` inside the call's input."""
        blocks = anthropic_server.tool_block(0, "toolu_1", name, ['{"topic": ', '"refu'])
        return anthropic_server.message(blocks, stop_reason="max_tokens")

    def reasoning_cut_off(self, *pieces: str) -> list[Any]:
        """``stop_reason: max_tokens`` after a thinking block."""
        return anthropic_server.message(
            anthropic_server.thinking_block(0, *pieces, signature="c2lnbmF0dXJl"), stop_reason="max_tokens"
        )

    def text_cut_off(self, *pieces: str) -> list[Any]:
        return anthropic_server.message(anthropic_server.text_block(0, *pieces), stop_reason="max_tokens")

    def not_json(self) -> bytes:
        return b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,\n\n'

    def error(self, status: int, message: str, *, kind: str | None = None, retry_after: str | None = None) -> Reply:
        headers = {"retry-after": retry_after} if retry_after else None
        return anthropic_server.error(status, kind or self.kinds[status], message, headers=headers)

    def error_event(self, message: str, *, transient: bool) -> Any:
        return anthropic_server.error_event(self.event_kinds[0 if transient else 1], message)

    def error_body(self, message: str) -> Any:
        return {"type": "error", "error": {"type": "invalid_request_error", "message": message}}


class GeminiFormat(WireFormat):
    """Google's ``streamGenerateContent?alt=sse`` stream (``gemini_server``)."""

    adapter = "gemini"
    default_base_url = "https://generativelanguage.googleapis.com"
    provider_class = GeminiProvider
    framing = gemini_server.FRAMING
    default_url = f"{default_base_url}/v1beta/models/{MODEL_ID}:streamGenerateContent?alt=sse"
    key_variable = "GEMINI_API_KEY"
    no_key_says = "api_key_env: GEMINI_API_KEY"
    own_option = "api_version"
    incomplete_says = "ended before the response was complete (no finishReason)"
    first_piece_at = 1  # every chunk is a whole response: the first holds the first piece
    keeps_error_type = True
    event_kinds = ("UNAVAILABLE", "INVALID_ARGUMENT")
    response_metadata = {
        "id": gemini_server.RESPONSE_ID,
        "provider_model": gemini_server.MODEL_VERSION,
        "provider_stop_reason": "STOP",
    }
    refusals = (
        Refusal(400, "INVALID_ARGUMENT", "* GenerateContentRequest.contents: contents is not specified"),
        Refusal(400, "FAILED_PRECONDITION", "User location is not supported for the API use."),
        Refusal(403, "PERMISSION_DENIED", f"Method doesn't allow unregistered callers (key {KEY})."),
        Refusal(
            404,
            "NOT_FOUND",
            "models/gemini-2.5-flsh is not found for API version v1beta, or is not supported for generateContent.",
        ),
    )
    overflow = Refusal(
        400,
        "INVALID_ARGUMENT",
        "The input token count (1200000) exceeds the maximum number of tokens allowed (1048576).",
    )
    kinds = {
        400: "INVALID_ARGUMENT",
        401: "UNAUTHENTICATED",
        403: "PERMISSION_DENIED",
        404: "NOT_FOUND",
        429: "RESOURCE_EXHAUSTED",
        500: "INTERNAL",
        503: "UNAVAILABLE",
    }

    def serve(self) -> Iterator[FakeServer]:
        return gemini_server.serve()

    def sent_key(self, headers: Mapping[str, str]) -> str | None:
        return headers.get("x-goog-api-key")

    def text(self, *pieces: str, usage: tuple[int, int] = (12, 9)) -> list[Any]:
        return gemini_server.text_answer(*pieces, prompt=usage[0], output=usage[1])

    def partial(self, *pieces: str) -> list[Any]:
        return gemini_server.text_answer(*pieces, "and the rest.")[: len(pieces)]

    def filtered(self, *pieces: str) -> list[Any]:
        return gemini_server.text_answer(*pieces, finish="SAFETY")

    def empty(self) -> list[Any]:
        return [gemini_server.chunk(finish="STOP")]

    def tool_call(self, call_id: str, name: str, arguments: Mapping[str, Any]) -> list[Any]:
        return gemini_server.calls_answer(gemini_server.call(name, dict(arguments), call_id=call_id))

    def malformed_tool_call(self, name: str) -> list[Any]:
        return gemini_server.calls_answer(gemini_server.call(name, ["refunds"]))  # type: ignore[arg-type]

    def reasoning_cut_off(self, *pieces: str) -> list[Any]:
        """Thought parts, then ``finishReason: MAX_TOKENS`` with the thoughts counted."""
        thoughts = [gemini_server.chunk(gemini_server.thought(piece)) for piece in pieces]
        return [*thoughts, gemini_server.chunk(finish="MAX_TOKENS", counts=gemini_server.usage(12, 0, thoughts=400))]

    def text_cut_off(self, *pieces: str) -> list[Any]:
        return gemini_server.text_answer(*pieces, finish="MAX_TOKENS")

    def not_json(self) -> bytes:
        return b'data: {"candidates": [{"content": {"parts": [{"text": "lo"}\r\n\r\n'

    def error(self, status: int, message: str, *, kind: str | None = None, retry_after: str | None = None) -> Reply:
        headers = {"Retry-After": retry_after} if retry_after else None
        return gemini_server.error(status, kind or self.kinds[status], message, headers=headers)

    def error_event(self, message: str, *, transient: bool) -> Any:
        if transient:
            return gemini_server.error_body(503, "UNAVAILABLE", message)
        return gemini_server.error_body(400, "INVALID_ARGUMENT", message)

    def error_body(self, message: str) -> Any:
        """A one-element list, as the non-streaming endpoint a proxy that dropped ``alt=sse`` reaches answers."""
        return [gemini_server.error_body(400, "INVALID_ARGUMENT", message)]


class OpenAIFormat(WireFormat):
    """OpenAI's Chat Completions stream (``openai_server``)."""

    adapter = "openai"
    default_base_url = "https://api.openai.com/v1"
    provider_class: ClassVar[type[StreamingProvider]] = OpenAIProvider
    framing = openai_server.FRAMING
    default_url = f"{default_base_url}/chat/completions"
    key_variable = "OPENAI_API_KEY"
    no_key_says = "api_key_env: OPENAI_API_KEY"
    own_option = "organization"
    incomplete_says = "ended before the response was complete"
    first_piece_at = 2  # the role chunk, the first piece
    response_metadata = {
        "id": openai_server.CHUNK_BASE["id"],
        "provider_model": openai_server.CHUNK_BASE["model"],
        "finish_reason": "stop",
    }
    refusals = (
        Refusal(400, "invalid_value", "Invalid value for 'temperature': expected a number between 0 and 2."),
        Refusal(
            401,
            "invalid_api_key",
            f"Incorrect API key provided: {KEY}. You can find your API key at https://platform.openai.com/account/api-keys.",
            advice="Check the connection's api_key or api_key_env.",
        ),
        Refusal(403, "unsupported_country_region_territory", "Country, region, or territory not supported"),
        Refusal(404, "model_not_found", "The model 'gpt-4o-mni' does not exist or you do not have access to it."),
    )
    overflow = Refusal(
        400,
        "context_length_exceeded",
        "This model's maximum context length is 128000 tokens. However, your messages resulted in 130000 tokens.",
    )
    kinds = {429: "rate_limit_exceeded"}  # the error's code, which the message quotes
    TYPES: ClassVar[Mapping[int, str]] = {429: "requests", 500: "server_error", 503: "server_error"}

    def serve(self) -> Iterator[FakeServer]:
        return openai_server.serve()

    def sent_key(self, headers: Mapping[str, str]) -> str | None:
        return headers.get("authorization", "").removeprefix("Bearer ") or None

    def text(self, *pieces: str, usage: tuple[int, int] = (12, 5)) -> list[Any]:
        return openai_server.text_chunks(*pieces, usage=usage)

    def partial(self, *pieces: str) -> list[Any]:
        return openai_server.text_chunks(*pieces)[: 1 + len(pieces)]

    def filtered(self, *pieces: str) -> list[Any]:
        answer = openai_server.text_chunks(*pieces)
        answer[-2] = openai_server.chunk({}, "content_filter")
        return answer

    def empty(self) -> list[Any]:
        return [openai_server.chunk({"role": "assistant", "content": ""}), openai_server.usage_chunk(12, 0)]

    def tool_call(self, call_id: str, name: str, arguments: Mapping[str, Any]) -> list[Any]:
        return openai_server.tool_call_chunks((call_id, name, halves(arguments)))

    def malformed_tool_call(self, name: str) -> list[Any]:
        return openai_server.tool_call_chunks(("call_1", name, ['{"topic": ', "refunds}"]))

    def cut_tool_call(self, name: str) -> list[Any]:
        """``finish_reason: length`` inside the call's arguments."""
        answer = openai_server.tool_call_chunks(("call_1", name, ['{"topic": ', '"refu']))
        answer[-2] = openai_server.chunk({}, "length")
        return answer

    def reasoning_cut_off(self, *pieces: str) -> list[Any]:
        """``finish_reason: length`` after reasoning deltas (``reasoning_content``, as compatible servers
        stream it; OpenAI itself streams none, so its answer is then empty)."""
        return [
            openai_server.chunk({"role": "assistant", "content": "", "refusal": None}),
            *(openai_server.chunk({"reasoning_content": piece}) for piece in pieces),
            openai_server.chunk({}, "length"),
            openai_server.usage_chunk(12, 400, reasoning=400),
        ]

    def text_cut_off(self, *pieces: str) -> list[Any]:
        answer = openai_server.text_chunks(*pieces)
        answer[-2] = openai_server.chunk({}, "length")
        return answer

    def not_json(self) -> bytes:
        return openai_server.sse('{"id": "chatcmpl-1", "choices": [')

    def error(self, status: int, message: str, *, kind: str | None = None, retry_after: str | None = None) -> Reply:
        headers = {"Retry-After": retry_after} if retry_after else None
        error_type = self.TYPES.get(status, "invalid_request_error")
        return openai_server.error(
            status, message, type=error_type, code=kind or self.kinds.get(status), headers=headers
        )

    def error_event(self, message: str, *, transient: bool) -> Any:
        """OpenAI's error object; a ``server_error`` is worth retrying, a ``code`` of 400 is not."""
        if transient:
            return {"error": {"message": message, "type": "server_error", "code": None}}
        return {"error": {"message": message, "code": 400}}

    def error_body(self, message: str) -> Any:
        return {"error": {"message": message, "type": "invalid_request_error", "code": "model_not_found"}}


class OpenRouterFormat(OpenAIFormat):
    """OpenRouter's Chat Completions stream (``openrouter_server``, encoded as ``openai_server`` encodes it)."""

    adapter = "openrouter"
    default_base_url = "https://openrouter.ai/api/v1"
    provider_class = OpenRouterProvider
    framing = openai_server.FRAMING
    default_url = f"{default_base_url}/chat/completions"
    key_variable = "OPENROUTER_API_KEY"
    no_key_says = "$OPENROUTER_API_KEY, which is not set"  # read by default, so named as the variable that is missing
    own_option = "site_url"
    kinds = {}  # the code of its error answers is the status, which the message does not repeat
    first_piece_at = 2  # the empty first chunk, the first piece
    response_metadata = {
        "id": openrouter_server.CHUNK_BASE["id"],
        "provider_model": openrouter_server.CHUNK_BASE["model"],
        "upstream_provider": openrouter_server.CHUNK_BASE["provider"],
    }
    refusals = (
        Refusal(400, None, "Provider returned error"),
        Refusal(401, None, f"No auth credentials found for key {KEY}", advice="$OPENROUTER_API_KEY"),
        Refusal(403, None, "openai/gpt-5.6-luna requires moderation on OpenAI.", advice="choose another model"),
        Refusal(
            404,
            None,
            "No endpoints found matching your data policy (Zero data retention).",
            advice="routing preferences",
        ),
    )
    overflow = Refusal(
        400,
        None,
        "This endpoint's maximum context length is 128000 tokens. However, you requested about 130000 tokens. "
        "Please reduce the length of either one, "
        'or use the "middle-out" transform to compress your prompt automatically.',
    )

    def serve(self) -> Iterator[FakeServer]:
        return openrouter_server.serve()

    def text(self, *pieces: str, usage: tuple[int, int] = (12, 5)) -> list[Any]:
        return openrouter_server.text_chunks(*pieces, usage=usage)

    def partial(self, *pieces: str) -> list[Any]:
        return openrouter_server.text_chunks(*pieces)[: 1 + len(pieces)]

    def filtered(self, *pieces: str) -> list[Any]:
        answer = openrouter_server.text_chunks(*pieces)
        answer[-2] = openrouter_server.chunk({"role": "assistant", "content": ""}, "content_filter")
        return answer

    def empty(self) -> list[Any]:
        return [openrouter_server.chunk(), openrouter_server.usage_chunk(12, 0)]

    def tool_call(self, call_id: str, name: str, arguments: Mapping[str, Any]) -> list[Any]:
        return openrouter_server.tool_call_chunks(call_id, name, halves(arguments))

    def malformed_tool_call(self, name: str) -> list[Any]:
        return openrouter_server.tool_call_chunks("call_1", name, ['{"topic": ', "refunds}"])

    def cut_tool_call(self, name: str) -> list[Any]:
        answer = openrouter_server.tool_call_chunks("call_1", name, ['{"topic": ', '"refu'])
        answer[-2] = openrouter_server.chunk({"role": "assistant", "content": ""}, "length")
        return answer

    def error(self, status: int, message: str, *, kind: str | None = None, retry_after: str | None = None) -> Reply:
        """OpenRouter's error answer; its ``code`` is the status, so ``kind`` has no place in it."""
        return openrouter_server.error(status, message, headers={"Retry-After": retry_after} if retry_after else None)

    def error_event(self, message: str, *, transient: bool) -> Any:
        """An error chunk with ``finish_reason: "error"``, as OpenRouter sends one once the stream began."""
        return openrouter_server.error_chunk(message, "server_error" if transient else 400)

    def error_body(self, message: str) -> Any:
        return {"error": {"code": 400, "message": message}}


FORMATS = (AnthropicFormat(), GeminiFormat(), OpenAIFormat(), OpenRouterFormat())

__all__ = ["FORMATS", "KEY", "MODEL_ID", "Refusal", "WireFormat"]
