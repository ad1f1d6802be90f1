"""Error mapping for the Anthropic adapter: the one place failures become ours.

Anthropic answers every error with ``{"type": "error", "error": {"type", "message"},
"request_id"}``: as the body of an error status (400 ``invalid_request_error``,
401 ``authentication_error``, 403 ``permission_error``, 404 ``not_found_error``,
413 ``request_too_large``, 429 ``rate_limit_error``, 500 ``api_error``, 529
``overloaded_error``), or as an ``event: error`` frame inside a stream that
began with 200. :func:`provider_error` turns each, and every transport failure
(:mod:`lg_core.providers._http.errors`), into a ProviderError whose
``retryable`` tells the engine whether repeating the request may succeed; the
engine retries those, after the wait a ``Retry-After`` asks for.
"""

from __future__ import annotations

from typing import Any

import httpx

from lg_core.errors import ContextWindowOverflowError, HTTPError, ProtocolError, ProviderError
from lg_core.providers._http.errors import (
    ErrorReply,
    error_member,
    is_context_overflow,
    is_retryable_status,
    parse_body,
    quoted_body,
    redact,
    status_message,
    transport_error,
)

# Error types that say "try again" rather than "this request is wrong" (mid-stream, where no status tells).
RETRYABLE_TYPES = frozenset({"overloaded_error", "api_error", "rate_limit_error", "timeout_error"})


def provider_error(cause: httpx.HTTPError | ErrorReply, *, endpoint: str, secret: str | None = None) -> ProviderError:
    """The ProviderError for ``cause``; ``secret`` (the API key) never appears in its message or body."""
    if isinstance(cause, httpx.HTTPError):
        return transport_error(cause, endpoint)
    body = redact(cause.body, secret)
    detail = _detail(body)
    message, kind = detail["message"], detail["type"]
    facts = {"error_type": kind, "request_id": detail["request_id"]}
    if cause.status in (None, 400, 413) and is_context_overflow(message):
        return ContextWindowOverflowError(
            f"{endpoint} rejected the request as longer than the model's context window: {message}",
            status=cause.status,
            **facts,
        )
    if cause.status is None:
        return ProviderError(
            f"{endpoint} reported an error mid-stream: {message}{_typed(kind)}",
            retryable=kind in RETRYABLE_TYPES,
            **facts,
        )
    if cause.status < 400:  # a proxy that ignored ``stream: true``, or answered an error with 200
        return ProtocolError(
            f"{endpoint} did not answer with an event stream (status {cause.status}): {message}",
            retryable=kind in RETRYABLE_TYPES,
            **facts,
        )
    return HTTPError(
        status_message(cause.status, message, kind, endpoint),
        status=cause.status,
        body=body,
        retryable=is_retryable_status(cause.status),
        retry_after=cause.retry_after,
        **facts,
    )


def _detail(body: str) -> dict[str, Any]:
    """``{"message", "type", "request_id"}`` from an Anthropic error body; the raw text when it is not one
    (a proxy's HTML page, or an ``event: error`` frame whose data is plain text)."""
    data = parse_body(body)
    error = error_member(data)
    request_id = data.get("request_id") if isinstance(data, dict) else None
    if not isinstance(error, dict):
        return {"message": quoted_body(body, "no error body"), "type": None, "request_id": request_id}
    message = error.get("message") or quoted_body(body, "no error message")
    kind = error.get("type")
    return {"message": str(message), "type": str(kind) if kind else None, "request_id": request_id}


def _typed(kind: str | None) -> str:
    return f" ({kind})" if kind else ""


__all__ = ["RETRYABLE_TYPES", "provider_error"]
