"""The LittleGhost error hierarchy, with the spec's class names.

    Exception
    └── Error
        ├── ConfigurationError
        │   ├── AdapterLoadError
        │   ├── CredentialError
        │   └── SandboxConfigurationError
        │       ├── CapabilityError
        │       ├── DependencyError
        │       ├── PolicyError
        │       └── UnsupportedPlatformError
        ├── InvocationError
        │   ├── AgentInterjectionError
        │   └── UnsupportedInputError
        ├── ProviderError
        │   ├── ContextWindowOverflowError
        │   ├── HTTPError
        │   └── ProtocolError
        │       ├── MalformedToolCallError
        │       ├── OutputLimitError
        │       ├── StructuredResultError
        │       └── ToolLoopError
        ├── PromptTemplateError
        │   ├── InvalidPromptTemplateError
        │   ├── MissingPromptLocalError
        │   └── MissingPromptTemplateError
        ├── AssemblyError
        │   ├── AssemblyLimitError
        │   ├── AssemblyRoutingError
        │   └── AssemblyStepTimeoutError
        ├── ReplayDivergenceError
        ├── RunNotFoundError
        ├── RunStateError
        ├── SessionActorError
        ├── StoreUnavailableError
        ├── CleanupError
        ├── SandboxLimitError
        ├── ToolError
        └── AbstractMethodError
    BaseException
    ├── CancelledError          (isinstance(e, Error) is also true)
    └── DeadlineExceededError   (isinstance(e, Error) is also true)

Why cancellation and deadlines derive from BaseException: a Tool's
``except Exception`` must not swallow them, the same choice asyncio made for
``asyncio.CancelledError``. They are registered as virtual subclasses of
:class:`Error` so ``isinstance(err, Error)`` still holds; an ``except Error``
clause does not catch them (Python matches except clauses on real subclasses).

Every error survives pickling with its extra attributes, because errors cross
process boundaries (Celery results, the run store).
"""

from __future__ import annotations

import abc
from typing import Any, cast


class Error(Exception, metaclass=abc.ABCMeta):
    """Base class for LittleGhost domain errors."""

    def __init__(self, message: str = "", **attributes: Any) -> None:
        super().__init__(message)
        self.message = message
        for name, value in attributes.items():
            setattr(self, name, value)
        self._attributes = attributes

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild_error, (type(self), self.message, self._attributes))

    def __str__(self) -> str:
        return self.message


def _rebuild_error(cls: type, message: str, attributes: dict[str, Any]) -> BaseException:
    return cast(BaseException, cls(message, **attributes))


class ConfigurationError(Error):
    """Configuration is invalid or cannot be used to build a runtime."""


class AdapterLoadError(ConfigurationError):
    """A provider adapter could not be found or loaded."""


class CredentialError(ConfigurationError):
    """No usable credentials could be resolved for a provider."""


class SandboxConfigurationError(ConfigurationError):
    """A sandbox declaration cannot be honoured on this host."""


class CapabilityError(SandboxConfigurationError):
    """The sandbox backend lacks a required capability."""


class DependencyError(SandboxConfigurationError):
    """A program the sandbox backend needs is missing."""


class PolicyError(SandboxConfigurationError):
    """A sandbox policy is invalid."""


class UnsupportedPlatformError(SandboxConfigurationError):
    """The sandbox backend does not run on this platform."""


class InvocationError(Error):
    """An invocation payload or operation is invalid."""


class AgentInterjectionError(InvocationError):
    """An active run cannot accept an interjection."""


class UnsupportedInputError(InvocationError):
    """An invocation contains an unsupported input form."""


class ProviderError(Error):
    """A provider request, response, or protocol failure."""

    def __init__(self, message: str = "", *, retryable: bool = False, **attributes: Any) -> None:
        super().__init__(message, retryable=retryable, **attributes)


class ContextWindowOverflowError(ProviderError):
    """The provider reports that the request exceeds its context window."""


MAX_ERROR_BODY_CHARS = 4096


class HTTPError(ProviderError):
    """A bounded HTTP or network failure from a provider connection.

    ``status`` is None when no response arrived; ``body`` keeps at most
    MAX_ERROR_BODY_CHARS of a text or bytes response body, because errors are
    stored with the run and logged, and a provider may answer with megabytes.
    """

    def __init__(self, message: str = "", *, status: int | None = None, body: Any = None, **attributes: Any) -> None:
        super().__init__(message, status=status, body=_bounded_body(body), **attributes)


def _bounded_body(body: Any) -> Any:
    """``body`` cut to MAX_ERROR_BODY_CHARS (bytes are decoded first); other values as given."""
    if isinstance(body, (bytes, bytearray)):
        body = bytes(body[: MAX_ERROR_BODY_CHARS * 4]).decode("utf-8", errors="replace")
    if isinstance(body, str) and len(body) > MAX_ERROR_BODY_CHARS:
        # The result is exactly MAX_ERROR_BODY_CHARS long, so bounding it again (an
        # unpickled copy is rebuilt through __init__) leaves it unchanged.
        notice = f"... [cut from {len(body)} characters]"
        return body[: MAX_ERROR_BODY_CHARS - len(notice)] + notice
    return body


class ProtocolError(ProviderError):
    """A provider violated the expected request-response protocol."""


class MalformedToolCallError(ProtocolError):
    """A model returned an invalid tool-call representation."""


class OutputLimitError(ProtocolError):
    """Configured limits stopped the agent before completion."""


class StructuredResultError(ProtocolError):
    """Structured output is absent, invalid, or exceeds safety limits."""

    def __init__(
        self,
        message: str = "",
        *,
        schema_name: str | None = None,
        validation_errors: list[str] | tuple[str, ...] = (),
        **attributes: Any,
    ) -> None:
        super().__init__(
            message,
            schema_name=schema_name,
            validation_errors=tuple(validation_errors),
            **attributes,
        )


class ToolLoopError(ProtocolError):
    """Repeated identical tool calls reached the termination limit."""


class PromptTemplateError(Error):
    """A prompt template could not be rendered."""


class InvalidPromptTemplateError(PromptTemplateError):
    """A prompt template has invalid syntax."""


class MissingPromptLocalError(PromptTemplateError):
    """A prompt template references a missing local variable."""


class MissingPromptTemplateError(PromptTemplateError):
    """No configured root contains the requested template."""


class AssemblyError(Error):
    """An assembly could not coordinate its participants."""


class AssemblyLimitError(AssemblyError):
    """An assembly exceeded one of its limits."""


class AssemblyRoutingError(AssemblyError):
    """An assembly could not route to a next participant."""


class AssemblyStepTimeoutError(AssemblyError):
    """An assembly step exceeded its timeout."""


class ReplayDivergenceError(Error):
    """A replayed workflow asked for a different step than it recorded."""


class RunNotFoundError(Error):
    """No stored run has the given id."""


class RunStateError(Error):
    """The stored run is not in a state that allows the operation."""


class SessionActorError(Error):
    """A session was named by an actor other than the one it belongs to.

    A session belongs to the actor whose write created it, in every store
    (spec: a store raises Error on an actor mismatch), so a session id alone
    never reaches another actor's conversation. The message names the session,
    never its owner.
    """

    @classmethod
    def for_session(cls, session_id: str) -> SessionActorError:
        """The error every store raises for ``session_id``, with one wording."""
        return cls(
            f"session {session_id!r} belongs to another actor; a session id names one actor's conversation, "
            "so continue it as the actor that created it or use another session id",
            session_id=session_id,
        )


class StoreUnavailableError(Error):
    """The run or session store's database could not be reached, even after retrying for a few seconds.

    Raised by whatever needed the store (``start_execution``, ``get_execution``,
    ``resume``, a session read); the driver's error is its ``__cause__``. What
    was stored is intact: the same call succeeds once the database is back, and
    runs in flight go on by themselves. A web app answers it with 503.
    """


class CleanupError(Error):
    """One or more managed resources failed to close."""


class SandboxLimitError(Error):
    """A sandboxed process was ended because it went past a supervised limit.

    ``limit`` names the bound (``memory_bytes``, or ``supervision`` when the sandbox
    could no longer observe the process) so a caller can tell how the process failed.
    """

    def __init__(self, message: str = "", *, limit: str = "", **attributes: Any) -> None:
        super().__init__(message, limit=limit, **attributes)


class ToolError(Error):
    """An expected tool failure; its message is shown to the model."""


class AbstractMethodError(Error):
    """A subclass did not implement a required method."""


class CancelledError(BaseException):
    """Cancellation stopped an operation; a started Run records ``cancelled``."""

    def __init__(self, message: str = "The run was cancelled.") -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


class DeadlineExceededError(BaseException):
    """An operation reached its deadline; a started Run records ``partial``."""

    def __init__(self, message: str = "The run reached its deadline.") -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


Error.register(CancelledError)
Error.register(DeadlineExceededError)

CONTROL_FLOW_ERRORS: tuple[type[BaseException], ...] = (CancelledError, DeadlineExceededError)
# What a cleanup step swallows: every ordinary error, and the control-flow ones too,
# which are BaseExceptions here but ordinary errors in the spec.
ERRORS_INCLUDING_CONTROL_FLOW: tuple[type[BaseException], ...] = (Exception, *CONTROL_FLOW_ERRORS)

__all__ = [
    "AbstractMethodError",
    "AdapterLoadError",
    "AgentInterjectionError",
    "AssemblyError",
    "AssemblyLimitError",
    "AssemblyRoutingError",
    "AssemblyStepTimeoutError",
    "CancelledError",
    "CapabilityError",
    "CleanupError",
    "ConfigurationError",
    "ContextWindowOverflowError",
    "CredentialError",
    "DeadlineExceededError",
    "DependencyError",
    "Error",
    "HTTPError",
    "InvalidPromptTemplateError",
    "InvocationError",
    "MalformedToolCallError",
    "MissingPromptLocalError",
    "MissingPromptTemplateError",
    "OutputLimitError",
    "PolicyError",
    "PromptTemplateError",
    "ProtocolError",
    "ProviderError",
    "ReplayDivergenceError",
    "RunNotFoundError",
    "RunStateError",
    "SandboxConfigurationError",
    "SandboxLimitError",
    "SessionActorError",
    "StoreUnavailableError",
    "StructuredResultError",
    "ToolError",
    "ToolLoopError",
    "UnsupportedInputError",
    "UnsupportedPlatformError",
]
