"""Error mapping for the OpenAI-compatible provider: the one place failures become ours.

Everything that can go wrong between us and the endpoint arrives here: an
httpx exception (no response, a broken stream, a timeout), an error status
with its body, a success status whose body is not an event stream, or an
``{"error": ...}`` object inside an otherwise successful stream (OpenRouter
reports upstream failures that way). :func:`provider_error`
turns each into a ProviderError subclass whose ``retryable`` tells the engine
whether repeating the same request may succeed (the spec's
``HTTPError#retryable?``): the engine retries those and announces each retry
with ``model_retry``. What a user can do about a status is a hint per adapter
(``hints``: OpenRouter's say what a 402 or a 404 means there).

OpenRouter's error objects add ``metadata``: the upstream provider that failed,
its own error (``raw``, often the only useful part of "Provider returned
error") and moderation ``reasons``. Messages quote them, bounded, whichever
adapter reads the answer (the ``openai`` one may point at OpenRouter too).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import httpx

from lg_core.errors import ContextWindowOverflowError, HTTPError, ProtocolError, ProviderError
from lg_core.providers._http.errors import (
    STATUS_HINTS,
    ErrorReply,
    error_member,
    is_context_overflow,
    is_retryable_status,
    parse_body,
    quoted_body,
    redact,
    retry_after_seconds,
    status_message,
    transport_error,
)

# In-stream error types and codes that say "try again" rather than "this request is wrong".
_RETRYABLE_KINDS = frozenset({"server_error", "rate_limit_exceeded", "rate_limit_error", "overloaded_error", "timeout"})
MAX_UPSTREAM_CHARS = 300  # of an upstream provider's raw error quoted in a message


def provider_error(
    cause: httpx.HTTPError | ErrorReply,
    *,
    endpoint: str,
    secret: str | None = None,
    hints: Mapping[int, str] = STATUS_HINTS,
) -> ProviderError:
    """The ProviderError for ``cause``; ``secret`` (the API key) never appears in its message or body;
    ``hints`` says what to do about an error status."""
    if isinstance(cause, httpx.HTTPError):
        return transport_error(cause, endpoint)
    body = redact(cause.body, secret)
    detail = _detail(body)
    # A gateway's message may say only "Provider returned error": the upstream's own (``raw``) tells.
    overflow = is_context_overflow(detail.get("code"), detail.get("type"), detail["message"], detail.get("raw"))
    if cause.status in (None, 400, 413) and overflow:
        return ContextWindowOverflowError(
            f"{endpoint} rejected the request as longer than the model's context window: {_with_upstream(detail)}",
            status=cause.status,
        )
    if cause.status is None:
        return _stream_error(detail, endpoint)
    if cause.status < 400:
        return _not_a_stream(cause.status, detail, endpoint)
    return HTTPError(
        status_message(cause.status, _with_upstream(detail), detail.get("code") or detail.get("type"), endpoint, hints),
        status=cause.status,
        body=body,
        retryable=is_retryable_status(cause.status) and not _out_of_quota(detail),
        retry_after=cause.retry_after,
    )


def _out_of_quota(detail: dict[str, Any]) -> bool:
    """OpenAI's 429 for an account without credit: no retry can succeed until someone pays."""
    return "insufficient_quota" in (detail.get("code"), detail.get("type"))


def _stream_error(detail: dict[str, Any], endpoint: str) -> ProviderError:
    """An error object sent inside a 200 stream (the spec's OpenAICompatible::StreamError)."""
    return _coded(ProviderError, f"{endpoint} reported an error mid-stream: {_with_upstream(detail)}", detail)


def _not_a_stream(status: int, detail: dict[str, Any], endpoint: str) -> ProviderError:
    """A success status without an event stream: a server or proxy that ignored ``stream: true``, or
    one that reports errors with 200. The body's message is the only clue the user gets, so it is kept."""
    message = f"{endpoint} did not answer with an event stream (status {status}): {detail['message']}"
    return _coded(ProtocolError, message, detail)


def _coded(cls: type[ProviderError], message: str, detail: dict[str, Any]) -> ProviderError:
    """``cls(message)`` carrying the body's ``code`` and ``type``, retryable when they say so."""
    code, kind = detail.get("code"), detail.get("type")
    return cls(message, retryable=_retryable_code(code, kind), error_type=kind, code=code)


def _retryable_code(code: Any, kind: Any) -> bool:
    """Whether an error object's code or type says "try again": a retryable HTTP status as the code
    (OpenRouter passes the upstream status), or a transient kind such as ``server_error``."""
    if isinstance(code, int) and not isinstance(code, bool):
        return is_retryable_status(code)
    return bool({str(code), str(kind)} & _RETRYABLE_KINDS)


def _detail(body: str) -> dict[str, Any]:
    """``{"message", "type", "code"}`` from an OpenAI-style error body (or a top-level ``{"code", "message"}``),
    with what OpenRouter's ``metadata`` tells (see :func:`_metadata`); the raw text when it is neither."""
    data = parse_body(body)
    error = error_member(data)
    if error is None and isinstance(data, dict) and isinstance(data.get("message"), str):
        error = data  # DashScope and others put "code" and "message" at the top level
    if not isinstance(error, dict):
        return {"message": quoted_body(body, "no error body")}
    message = error.get("message") or quoted_body(body, "no error message")
    detail = {"message": str(message), "type": error.get("type"), "code": error.get("code")}
    metadata = error.get("metadata")
    return {**detail, **_metadata(metadata)} if isinstance(metadata, dict) else detail


def _metadata(metadata: dict[str, Any]) -> dict[str, Any]:
    """What an OpenRouter ``error.metadata`` tells a user: which upstream ``provider`` failed, its
    own error (``raw``, bounded) and the moderation ``reasons``."""
    found: dict[str, Any] = {}
    if isinstance(metadata.get("provider_name"), str) and metadata["provider_name"]:
        found["provider"] = metadata["provider_name"]
    raw = metadata.get("raw")
    if raw not in (None, "", {}):
        text = raw if isinstance(raw, str) else json.dumps(raw)
        found["raw"] = text.strip()[:MAX_UPSTREAM_CHARS]
    reasons = metadata.get("reasons")
    if isinstance(reasons, list) and reasons:
        found["reasons"] = [str(reason) for reason in reasons]
    return found


def _with_upstream(detail: dict[str, Any]) -> str:
    """The message, then `` (upstream provider X: its error; flagged for: ...)`` when the body says."""
    parts = []
    if detail.get("provider"):
        parts.append(f"upstream provider {detail['provider']}" + (f": {detail['raw']}" if detail.get("raw") else ""))
    elif detail.get("raw"):
        parts.append(f"upstream error: {detail['raw']}")
    if detail.get("reasons"):
        parts.append("flagged for: " + ", ".join(detail["reasons"]))
    message = detail["message"]
    return f"{message.rstrip('. ')} ({'; '.join(parts)})" if parts else message


__all__ = ["ErrorReply", "provider_error", "retry_after_seconds"]
