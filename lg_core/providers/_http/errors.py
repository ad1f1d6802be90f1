"""The failures every HTTP adapter meets the same way, and the parts of an error reply they share.

Each adapter keeps one ``provider_error`` function (one boundary per
integration, so httpx errors are translated in one place) that reads its API's
error bodies; what does not depend on the API lives here: a transport failure
(no response, a broken stream, a timeout), the wait ``Retry-After`` asks for,
which statuses are worth repeating, the message of an error status, keeping the
API key out of it (the provider cleans every secret of the connection too:
``redaction``), and the first steps of reading an error body (its JSON, if it
is JSON; its ``error`` member; its text, when it holds no message of its own).
"""

from __future__ import annotations

import dataclasses
import email.utils
import json
from collections.abc import Mapping
from datetime import UTC, datetime
from http import HTTPStatus
from types import MappingProxyType
from typing import Any

import httpx
import httpx_sse

from lg_core.errors import HTTPError, ProtocolError, ProviderError
from lg_core.providers._http.redaction import MIN_SECRET_CHARS, REDACTED

# 408 timeout, 409 conflict (OpenAI's "please retry"), 429 rate limit; every 5xx (Anthropic's 529 overloaded) too.
RETRYABLE_STATUSES = frozenset({408, 409, 429})
QUOTED_BODY_CHARS = 300  # of an error body that is not the API's JSON, quoted in a message
# What a user can do about a status, added to its message; an adapter may give its own
# (OpenRouter's 402 means out of credits).
STATUS_HINTS: Mapping[int, str] = MappingProxyType(
    {
        401: "Check the connection's api_key or api_key_env.",
        403: "Check the connection's api_key or api_key_env.",
    }
)

# How providers word a request longer than the model's context window. Every adapter checks them all:
# gateways (OpenRouter, LiteLLM, Google's OpenAI-compatible endpoint) pass one provider's words
# through another's API.
CONTEXT_OVERFLOW_MARKERS = (
    "context_length_exceeded",  # OpenAI's code
    "maximum context length",  # OpenAI, OpenRouter, vLLM: "This model's maximum context length is ..."
    "context window",
    "context length",
    "too many tokens",
    "prompt is too long",  # Anthropic: "prompt is too long: 208310 tokens > 200000 maximum"
    "exceed context limit",  # Anthropic: "input length and `max_tokens` exceed context limit: ..."
    "exceeds the maximum number of tokens",  # Gemini: "The input token count (1200000) exceeds the maximum ..."
    "input token count",  # Gemini, Vertex AI: "... the input token count is 1200000 but model only supports up to ..."
    "exceed_context_size",  # llama.cpp's error type: "... exceeds the available context size ..."
    "available context size",
)


@dataclasses.dataclass(frozen=True, slots=True)
class ErrorReply:
    """An error the endpoint answered with: an HTTP status and body (an error status, or a success whose
    body is not an event stream), or (``status=None``) an error frame inside the stream.

    ``retry_after`` is the server's ``Retry-After`` (or ``retry-after-ms``) in seconds, when it sent one.
    """

    status: int | None
    body: str
    retry_after: float | None = None


def is_retryable_status(status: int) -> bool:
    """Whether repeating a request answered with ``status`` may succeed (the spec's ``HTTPError#retryable?``)."""
    return status in RETRYABLE_STATUSES or status >= 500


def retry_after_seconds(headers: Mapping[str, str]) -> float | None:
    """The wait a 429 or 503 asks for: ``retry-after-ms`` (OpenAI), else ``Retry-After`` as
    seconds or an HTTP date; None when absent or unreadable."""
    milliseconds = headers.get("retry-after-ms")
    if milliseconds is not None:
        try:
            return max(float(milliseconds) / 1000, 0.0)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(float(value), 0.0)
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max((when - datetime.now(UTC)).total_seconds(), 0.0) if when.tzinfo else None


def transport_error(cause: httpx.HTTPError, endpoint: str) -> ProviderError:
    """No (complete) response: connection refused or dropped, a timeout, a broken chunked body,
    or a body that is not an event stream after all."""
    if isinstance(cause, httpx_sse.SSEError):  # a TransportError subclass, but the server's fault, not the network's
        return ProtocolError(f"{endpoint} did not answer with an event stream: {cause}")
    if isinstance(cause, httpx.LocalProtocolError):  # our request is not valid HTTP; httpx quotes the bad header value
        return ProviderError(
            f"the request to {endpoint} could not be sent: a header value is not valid HTTP "
            "(check the connection's api_key and headers for line breaks or control characters)"
        )
    if isinstance(cause, httpx.TimeoutException):
        return HTTPError(f"{endpoint} did not answer in time ({type(cause).__name__})", retryable=True)
    if isinstance(cause, (httpx.TransportError, httpx.StreamError)):
        reason = str(cause) or type(cause).__name__
        return HTTPError(f"the connection to {endpoint} failed: {reason}", retryable=True)
    return ProviderError(f"the request to {endpoint} failed: {cause}")


def is_context_overflow(*texts: object) -> bool:
    """Whether any of ``texts`` (an error's message, type, code, an upstream's own error) says the
    request was longer than the context window; an adapter asks only of a 400 or 413, or an error frame."""
    text = " ".join(str(part) for part in texts if part).lower()
    return any(marker in text for marker in CONTEXT_OVERFLOW_MARKERS)


def status_message(
    status: int, message: str, code: object, endpoint: str, hints: Mapping[int, str] = STATUS_HINTS
) -> str:
    """``<endpoint> answered 401 Unauthorized: <the server's message> (<code>).`` and the hint ``hints``
    has for the status (by default: check the key of a refused request)."""
    try:
        phrase = HTTPStatus(status).phrase
    except ValueError:
        phrase = "Overloaded" if status == 529 else "error"  # 529: Anthropic's "overloaded", in no HTTP registry
    suffix = f" ({code})" if code and code != status else ""  # OpenRouter's code repeats the status
    hint = f" {hints[status]}" if status in hints else ""
    return f"{endpoint} answered {status} {phrase}: {message.rstrip('. ')}{suffix}.{hint}"


def redact(text: str, secret: str | None) -> str:
    """``text`` without ``secret``: an endpoint may echo the key it refused. A value shorter than
    MIN_SECRET_CHARS is no credential and is left alone, so that ordinary text is not garbled."""
    if secret and len(secret) >= MIN_SECRET_CHARS and secret in text:
        return text.replace(secret, REDACTED)
    return text


def parse_body(body: str) -> Any:
    """An error body's JSON; None when it is not JSON (a proxy's HTML page, an error frame's plain text)."""
    try:
        return json.loads(body) if body else None
    except json.JSONDecodeError:
        return None


def error_member(data: Any) -> Any:
    """The ``error`` member of a parsed error body, None without one; a bare string is read as its message."""
    error = data.get("error") if isinstance(data, dict) else None
    return {"message": error} if isinstance(error, str) else error


def quoted_body(body: str, fallback: str) -> str:
    """The start of an error body, for a message when the body holds none of its own; ``fallback`` if it is empty."""
    return body.strip()[:QUOTED_BODY_CHARS] or fallback


__all__ = [
    "CONTEXT_OVERFLOW_MARKERS",
    "ErrorReply",
    "QUOTED_BODY_CHARS",
    "REDACTED",
    "RETRYABLE_STATUSES",
    "STATUS_HINTS",
    "error_member",
    "is_context_overflow",
    "is_retryable_status",
    "parse_body",
    "quoted_body",
    "redact",
    "retry_after_seconds",
    "status_message",
    "transport_error",
]
