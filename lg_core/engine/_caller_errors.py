"""What a caller sees of the error that ends a run or makes a model call retry.

An error's own text is for operators: a provider's answer can echo a key, an
internal host name or another tenant's data, and an application's exception
can say anything. The spec's ``Hook#error_message`` gives the caller-safe text
("avoid exposing secrets or internal exception text"); without a hook that
answers, the default is the error's class and a fixed sentence for it
(:func:`default_error_message`). A cancellation keeps its own message: the
reason whoever cancelled gave (the application, or the framework's own words).

What stays with the operator: the run's and the step's stored ``error`` (``lg
runs show``), redacted of the connection's secrets by the adapter, and the log.
What a caller sees: the terminal event's ``message`` and ``error_class``, and an
``error`` carrying only the class, that message and the attributes in
:data:`CALLER_ATTRIBUTES` (:func:`caller_error_dict`); a ``model_retry`` event's
``message`` likewise.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from lg_core.engine.codec import class_path
from lg_core.errors import (
    CancelledError,
    ConfigurationError,
    ContextWindowOverflowError,
    CredentialError,
    DeadlineExceededError,
    Error,
    HTTPError,
    InvocationError,
    MalformedToolCallError,
    OutputLimitError,
    ProtocolError,
    ProviderError,
    StoreUnavailableError,
    StructuredResultError,
    ToolError,
    ToolLoopError,
)

# The sentence of each error class; a class not listed takes its nearest listed base's.
SAFE_SENTENCES: Mapping[type[BaseException], str] = MappingProxyType(
    {
        ContextWindowOverflowError: "the conversation is longer than the model's context window",
        HTTPError: "the model provider returned an error",
        MalformedToolCallError: "the model made a tool call that could not be read",
        OutputLimitError: "the model reached its output limit before it finished",
        StructuredResultError: "the model's answer did not match the expected result",
        ToolLoopError: "the model repeated the same tool call too many times",
        ProtocolError: "the model provider's answer could not be read",
        ProviderError: "the request to the model provider failed",
        DeadlineExceededError: "the run reached its deadline",
        CredentialError: "the model provider's credentials are missing or were refused",
        ConfigurationError: "the agent is not configured correctly",
        InvocationError: "the request could not be run",
        StoreUnavailableError: "the run store could not be reached",
        ToolError: "a tool failed",
        Error: "the run failed",
    }
)
UNEXPECTED = "the run failed with an unexpected error"
# Facts about an error a caller may act on (try again, and when); nothing the provider wrote.
CALLER_ATTRIBUTES = ("status", "retryable", "retry_after")


def default_error_message(error: BaseException) -> str:
    """``<ErrorClass>: <its fixed sentence>.``; a cancellation's own message (its reason)."""
    if isinstance(error, CancelledError) and str(error):
        return str(error)
    sentence = next((SAFE_SENTENCES[cls] for cls in type(error).__mro__ if cls in SAFE_SENTENCES), UNEXPECTED)
    return f"{type(error).__name__}: {sentence}."


def caller_error_dict(error: BaseException, message: str) -> dict[str, Any]:
    """The stored form of ``error`` a caller may see: its class, ``message`` (the caller-safe one)
    and the :data:`CALLER_ATTRIBUTES` it has; the form a terminal event carries."""
    cls = type(error)
    data: dict[str, Any] = {"class": class_path(cls), "name": cls.__name__, "message": message}
    attributes = getattr(error, "_attributes", None) or {}
    kept = {name: attributes[name] for name in CALLER_ATTRIBUTES if _plain(attributes.get(name))}
    if kept:
        data["attributes"] = kept
    return data


def _plain(value: Any) -> bool:
    return isinstance(value, (bool, int, float))


__all__ = ["CALLER_ATTRIBUTES", "SAFE_SENTENCES", "UNEXPECTED", "caller_error_dict", "default_error_message"]
