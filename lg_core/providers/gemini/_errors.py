"""Error mapping for the Gemini adapter: the one place failures become ours.

Google answers every error with ``{"error": {"code", "message", "status", "details"}}``
(a one-element list of it on some endpoints): as the body of an error status (400
``INVALID_ARGUMENT`` or ``FAILED_PRECONDITION``, 403 ``PERMISSION_DENIED``, 404
``NOT_FOUND``, 429 ``RESOURCE_EXHAUSTED``, 500 ``INTERNAL``, 503 ``UNAVAILABLE``, 504
``DEADLINE_EXCEEDED``), or as a chunk of a stream that began with 200.
:func:`provider_error` turns each, and every transport failure
(:mod:`lg_core.providers._http.errors`), into a ProviderError whose ``retryable``
tells the engine whether repeating the request may succeed. Google states the wait
a 429 asks for in a ``google.rpc.RetryInfo`` detail (``"retryDelay": "37s"``) rather
than a ``Retry-After`` header; either becomes ``retry_after``.
"""

from __future__ import annotations

import re
from typing import Any

import httpx

from lg_core.errors import ContextWindowOverflowError, HTTPError, ProtocolError, ProviderError
from lg_core.providers._http.errors import (
    ErrorReply,
    is_context_overflow,
    is_retryable_status,
    parse_body,
    quoted_body,
    redact,
    status_message,
    transport_error,
)

# Canonical codes that say "try again" rather than "this request is wrong" (mid-stream, where no status tells).
RETRYABLE_CODES = frozenset({"RESOURCE_EXHAUSTED", "UNAVAILABLE", "INTERNAL", "DEADLINE_EXCEEDED", "ABORTED"})
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)s\s*$")
KEY_HINT = " Check the connection's api_key or api_key_env."  # what status_message adds to a 401 or 403
# Models before Gemini 3 refuse responseSchema beside function declarations.
_SCHEMA_WITH_TOOLS = "function calling with a response mime type"


def provider_error(
    cause: httpx.HTTPError | ErrorReply, *, endpoint: str, secret: str | None = None, credential_hint: str = KEY_HINT
) -> ProviderError:
    """The ProviderError for ``cause``; ``secret`` (the API key or access token) never appears in its
    message or body; ``credential_hint`` says what to check when the credential is refused."""
    if isinstance(cause, httpx.HTTPError):
        return transport_error(cause, endpoint)
    body = redact(cause.body, secret)
    detail = _detail(body)
    message, code = detail["message"], detail["status"]
    if cause.status in (None, 400) and is_context_overflow(message):
        return ContextWindowOverflowError(
            f"{endpoint} rejected the request as longer than the model's context window: {message}",
            status=cause.status,
            error_type=code,
        )
    if cause.status is None:
        retryable = code in RETRYABLE_CODES or (isinstance(detail["code"], int) and is_retryable_status(detail["code"]))
        return ProviderError(
            f"{endpoint} reported an error mid-stream: {message.rstrip('. ')}{_coded(code)}",
            retryable=retryable,
            error_type=code,
        )
    if cause.status < 400:  # a proxy that answered with JSON, or dropped ``alt=sse``
        return ProtocolError(
            f"{endpoint} did not answer with an event stream (status {cause.status}): {message}",
            retryable=code in RETRYABLE_CODES,
            error_type=code,
        )
    return HTTPError(
        _message(cause.status, message, code, endpoint, detail["reason"], credential_hint),
        status=cause.status,
        body=body,
        retryable=is_retryable_status(cause.status),
        retry_after=cause.retry_after if cause.retry_after is not None else detail["retry_delay"],
        error_type=code,
    )


def _detail(body: str) -> dict[str, Any]:
    """``{"message", "status", "code", "reason", "retry_delay"}`` from a Google error body; the raw
    text when it is not one (a proxy's HTML page)."""
    data = parse_body(body)
    if isinstance(data, list) and data:
        data = data[0]
    error = data.get("error") if isinstance(data, dict) else None
    if not isinstance(error, dict):
        text = error if isinstance(error, str) else quoted_body(body, "")
        return {"message": text or "no error body", "status": None, "code": None, "reason": None, "retry_delay": None}
    details = [item for item in error.get("details") or () if isinstance(item, dict)]
    return {
        "message": str(error.get("message") or quoted_body(body, "no error message")),
        "status": str(error["status"]) if error.get("status") else None,
        "code": error.get("code"),
        "reason": next((str(item["reason"]) for item in details if item.get("reason")), None),
        "retry_delay": next((_seconds(item["retryDelay"]) for item in details if "retryDelay" in item), None),
    }


def _seconds(duration: Any) -> float | None:
    """A protobuf Duration in JSON (``"37s"``, ``"0.5s"``) as seconds."""
    match = _DURATION.match(duration) if isinstance(duration, str) else None
    return float(match.group(1)) if match else None


def _message(
    status: int, message: str, code: str | None, endpoint: str, reason: str | None, credential_hint: str
) -> str:
    """The shared status message, with this connection's credential hint in place of the shared one."""
    text = status_message(status, message, code, endpoint)
    if text.endswith(KEY_HINT):
        text = text.removesuffix(KEY_HINT) + credential_hint
    return text + _hint(status, message, reason, credential_hint)


def _hint(status: int, message: str, reason: str | None, credential_hint: str) -> str:
    """What to change, where Google's message leaves it unsaid."""
    if status == 400 and (reason == "API_KEY_INVALID" or "api key not valid" in message.lower()):
        return credential_hint  # Google answers a wrong key with 400, which status_message gives no key hint
    if status == 400 and _SCHEMA_WITH_TOOLS in message.lower():
        return (
            " This model cannot combine tools with native structured output; leave the connection's "
            "capabilities.native_structured_output off (result schemas then go through a tool)."
        )
    return ""


def _coded(code: str | None) -> str:
    return f" ({code})" if code else ""


__all__ = ["KEY_HINT", "RETRYABLE_CODES", "provider_error"]
