"""Tool: a validated way for the model to call application code.

    class HelpCenterLookupTool(Tool):
        description = "Look up a help center entry by topic."
        input_schema = {"type": "object", "properties": {"topic": {"type": "string"}},
                        "required": ["topic"], "additionalProperties": False}

        def call(self, input):
            return ENTRIES.get(input["topic"], "No entry.")

The class declares what the model sees (``tool_name``, ``description``,
``input_schema`` or a Pydantic ``Input`` model); ``call`` does the work. Input
is checked with ``jsonschema`` before ``call`` runs. A :class:`ToolError`
message goes back to the model; any other exception is replaced by its class
name for the model and kept for the application (callbacks, diagnostics).

Retry policy: a tool is re-run if the process running it dies
(``at_most_once = False``, the default). Declare ``at_most_once = True`` for a
side effect that must never repeat; after a crash mid-call the model is told
the outcome is unknown instead. Either way ``self.idempotency_key`` is stable
for one tool call across retries, so a downstream API can deduplicate.
"""

from __future__ import annotations

import asyncio
import builtins
import copy
import dataclasses
import inspect
import json
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ValidationError

from lg_core._tool_input import compiled_input_schema, describe_model_error, describe_schema_error
from lg_core.callbacks import awaited
from lg_core.content import Text, well_formed_text
from lg_core.datamap import deep_freeze
from lg_core.errors import (
    CONTROL_FLOW_ERRORS,
    AbstractMethodError,
    CleanupError,
    ConfigurationError,
    ToolError,
)
from lg_core.models.request import ToolSpecification
from lg_core.run_context import RunContext
from lg_core.tool_declarations import (
    NAME_PATTERN,
    check_call,
    default_class_name,
    derived_tool_name,
    refuse_shadowed_bindings,
    takes_arguments,
)
from lg_core.tool_values import artifact_block, content_blocks, render_value

# Raised through a tool's call rather than reported to the model: they end or clean up the run.
_RUN_LEVEL_ERRORS: tuple[type[BaseException], ...] = (*CONTROL_FLOW_ERRORS, CleanupError)


@dataclasses.dataclass(frozen=True, slots=True)
class Binding:
    """Run-scoped collaborators given to a tool; never model arguments."""

    agent: Any = None
    run: Any = None
    runtime: Any = None
    model: Any = None
    workspace: Any = None
    sandbox: Any = None
    idempotency_key: str | None = None

    def with_(self, **changes: Any) -> Binding:
        """A copy with only ``changes`` replaced."""
        return dataclasses.replace(self, **changes)

    def build(self, *tool_classes: type[Tool]) -> list[Tool]:
        return [cls(binding=self) for cls in tool_classes]


@dataclasses.dataclass(frozen=True, slots=True, repr=False)
class Artifact:
    """A file or media produced by a tool: inline bytes or a deferred reference.

    Immutable and hashable like the spec's Artifact: ``metadata`` (and a mapping
    ``reference``) are deeply frozen when the artifact is built, equality and the
    hash cover every field, and ``repr`` shows only the kind, media type and size,
    because names, metadata and references may identify people or private storage
    and reprs end up in logs and diagnostics.
    """

    media_type: str
    data: builtins.bytes | None = None  # builtins.: the class's own `bytes` property would shadow it
    name: str | None = None
    reference: Any = None
    metadata: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        if (self.data is None) == (self.reference is None):
            raise ValueError("an Artifact has either data (inline) or a reference (deferred), not both")
        if not isinstance(self.media_type, str) or not self.media_type:
            raise TypeError(
                f"Artifact.media_type must be a non-empty MIME type string, got {type(self.media_type).__name__}"
            )
        if self.name is not None and not isinstance(self.name, str):
            raise TypeError(f"Artifact.name must be a string or None, got {type(self.name).__name__}")
        if self.data is not None:
            object.__setattr__(self, "data", _artifact_bytes(self.data))
        if not isinstance(self.metadata, Mapping):
            raise TypeError(f"Artifact.metadata must be a mapping, got {type(self.metadata).__name__}")
        object.__setattr__(self, "metadata", deep_freeze(self.metadata))
        object.__setattr__(self, "reference", deep_freeze(self.reference))

    @classmethod
    def deferred(
        cls, reference: Any, media_type: str, name: str | None = None, metadata: Mapping[str, Any] | None = None
    ) -> Artifact:
        """An artifact whose bytes the application loads later from ``reference``."""
        return cls(media_type=media_type, reference=reference, name=name, metadata=metadata or {})

    @property
    def inline(self) -> bool:
        return self.data is not None

    @property
    def bytes(self) -> int | None:
        """The known byte count (the spec's ``Artifact#bytes``); None for a deferred artifact."""
        return None if self.data is None else len(self.data)

    def __hash__(self) -> int:
        return hash(_canonical((self.media_type, self.data, self.name, self.reference, self.metadata)))

    def __repr__(self) -> str:
        if self.data is not None:
            return f"<Artifact inline {self.media_type} {len(self.data)} bytes>"
        return f"<Artifact deferred {self.media_type}>"


def _artifact_bytes(data: Any) -> bytes:
    """Inline data as ``bytes``: a str here is a mistake (which encoding?), caught when built."""
    if isinstance(data, bytes):
        return data
    if isinstance(data, (bytearray, memoryview)):
        return bytes(data)
    raise TypeError(
        f"Artifact.data must be bytes, bytearray or memoryview, got {type(data).__name__}"
        + ("; encode text first, e.g. text.encode()" if isinstance(data, str) else "")
    )


def _canonical(value: Any) -> Any:
    """A hashable form that is equal whenever the values are equal (mapping order ignored).

    A leaf that cannot be hashed contributes only its type, which keeps equal
    artifacts hashing equally at the cost of a collision.
    """
    if isinstance(value, Mapping):
        items = sorted(value.items(), key=lambda item: repr(item[0]))
        return ("map", tuple((key, _canonical(item)) for key, item in items))
    if isinstance(value, tuple):
        return ("seq", tuple(_canonical(item) for item in value))
    try:
        hash(value)
    except TypeError:
        return ("unhashable", type(value).__qualname__)
    return value


@dataclasses.dataclass(frozen=True, slots=True)
class ToolReturn:
    """A tool's value together with the artifacts it produced (``Tool.Result``)."""

    value: Any
    artifacts: tuple[Artifact, ...] = ()

    def __post_init__(self) -> None:
        artifacts = tuple(self.artifacts)
        for artifact in artifacts:
            if not isinstance(artifact, Artifact):
                raise TypeError(f"Tool.Result artifacts must be Artifact objects, got {type(artifact).__name__}")
        object.__setattr__(self, "artifacts", artifacts)


@dataclasses.dataclass(frozen=True, slots=True)
class EndsRun:
    """A tool's return value that ends its run: the run completes once its turn's calls are done.

    ``value`` (JSON) is what the run's result keeps (``RunResult.ended_by``) and ``reply`` what
    the model's tool result says. A tool that passes control elsewhere (a Swarm member's
    handoff) returns one, so the run records the decision and stops instead of asking the
    model for another turn. The turn's other calls still run and are answered; when several
    of them return one, the first in call order is the run's ending.
    """

    value: Any
    reply: str = "Done."


@dataclasses.dataclass(frozen=True, slots=True)
class ToolOutcome:
    """The normalized result of one execution, for the model and the application."""

    status: Literal["success", "error"]
    content: tuple[Any, ...]
    value: Any = None
    artifacts: tuple[Artifact, ...] = ()
    error: BaseException | None = None
    error_kind: str | None = None
    ends_run: bool = False  # the tool returned EndsRun: ``value`` is the run's ending value

    @property
    def ok(self) -> bool:
        return self.status == "success"

    @property
    def text(self) -> str:
        return "".join(block.text for block in self.content if isinstance(block, Text))

    @classmethod
    def failure(cls, message: str, kind: str, error: BaseException | None = None) -> ToolOutcome:
        return cls(status="error", content=(Text(text=well_formed_text(message)),), error=error, error_kind=kind)


@dataclasses.dataclass(frozen=True, slots=True)
class PreparedInput:
    """Tool input converted for ``call``: an ``Input`` model instance, else a copy of the mapping."""

    value: Any


class Tool:
    """Base class for application tools."""

    tool_name: ClassVar[str]
    description: ClassVar[str] = ""
    input_schema: ClassVar[Any] = MappingProxyType({"type": "object"})
    Input: ClassVar[type[BaseModel] | None] = None
    exclusive: ClassVar[bool] = False
    at_most_once: ClassVar[bool] = False
    available_if: ClassVar[Callable[[Binding], bool] | None] = None
    Result = ToolReturn

    _schema: ClassVar[Mapping[str, Any]] = MappingProxyType({"type": "object"})
    _validator: ClassVar[Any] = None
    _input_model: ClassVar[type[BaseModel] | None] = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        refuse_shadowed_bindings(cls)
        if "tool_name" not in vars(cls):
            cls.tool_name = derived_tool_name(cls)
        if not isinstance(cls.tool_name, str) or not NAME_PATTERN.fullmatch(cls.tool_name):
            raise ConfigurationError(
                f"{cls.__qualname__}.tool_name {cls.tool_name!r} must be 1-64 letters, digits, '_' or '-'"
            )
        if not isinstance(cls.description, str):
            raise ConfigurationError(f"{cls.__qualname__}.description must be a string")
        for flag in ("exclusive", "at_most_once"):  # a string "false" would silently mean True
            if not isinstance(getattr(cls, flag), bool):
                raise ConfigurationError(f"{cls.__qualname__}.{flag} must be True or False, got {getattr(cls, flag)!r}")
        predicate = vars(cls).get("available_if")
        if predicate is not None:
            function = predicate.__func__ if isinstance(predicate, staticmethod) else predicate
            if not callable(function) or not takes_arguments(function, 1):
                raise ConfigurationError(
                    f"{cls.__qualname__}.available_if must be a function of the binding alone, "
                    f"`def available_if(binding): ...` (no self), got {predicate!r}"
                )
            cls.available_if = staticmethod(function)
        if "call" in vars(cls):
            check_call(cls, vars(cls)["call"])
        if "input_schema" in vars(cls) or "Input" in vars(cls):
            cls._compile_schema()

    @classmethod
    def _compile_schema(cls) -> None:
        model = cls.Input if "Input" in vars(cls) else None
        declares_schema = "input_schema" in vars(cls)
        cls._validator, schema, cls._input_model = compiled_input_schema(
            cls.__qualname__, cls.input_schema, model, declares_schema=declares_schema
        )
        cls._schema = cls.input_schema = schema

    # -- class-level queries ----------------------------------------------------

    @classmethod
    def specification(cls) -> ToolSpecification:
        return ToolSpecification(name=cls.tool_name, description=cls.description, input_schema=cls._schema)

    @classmethod
    def available(cls, binding: Binding) -> bool:
        """Whether the registry offers this tool for ``binding``; an async predicate is run to completion."""
        predicate = cls.available_if
        if predicate is None:
            return True
        return bool(awaited(predicate(binding), f"{cls.__qualname__}.available_if"))

    @classmethod
    def define(
        cls,
        name: str,
        description: str,
        input_schema: Mapping[str, Any] | type[BaseModel] | None = None,
        implementation: Callable[..., Any] | None = None,
        **attributes: Any,
    ) -> type[Tool]:
        """An anonymous Tool class backed by ``implementation(input)`` (or ``(input, context=)``)."""
        if implementation is None or not callable(implementation):
            raise ConfigurationError("Tool.define needs an implementation callable")
        wants_context = "context" in inspect.signature(implementation).parameters

        def call(self: Tool, input: Any) -> Any:
            return implementation(input, context=self.context) if wants_context else implementation(input)

        namespace = {
            "tool_name": name,
            "description": description,
            # As given: the class form's checks apply (a mapping or a Pydantic model, anything else refused).
            "input_schema": {"type": "object"} if input_schema is None else input_schema,
            "call": call,
            **attributes,
        }
        return type(f"{default_class_name(name)}Tool", (cls,), namespace)

    # -- instance ---------------------------------------------------------------

    def __init__(self, binding: Binding | None = None) -> None:
        self.binding = binding or Binding()
        self.context: Any = None

    agent = property(lambda self: self.binding.agent)
    run = property(lambda self: self.binding.run)
    runtime = property(lambda self: self.binding.runtime)
    model = property(lambda self: self.binding.model)
    workspace = property(lambda self: self.binding.workspace)
    sandbox = property(lambda self: self.binding.sandbox)
    idempotency_key = property(lambda self: self.binding.idempotency_key)

    def call(self, input: Any) -> Any:
        raise AbstractMethodError(f"{type(self).__qualname__} must define call(self, input)")

    def close(self) -> None:
        """Release resources owned by this tool instance."""

    def validate(self, input: Any) -> list[str]:
        """Messages describing why ``input`` does not match the schema (empty when valid)."""
        if not isinstance(input, Mapping):
            return [f"input must be a JSON object, got {type(input).__name__}"]
        validator = type(self)._validator
        if validator is None:
            return []
        return [describe_schema_error(error) for error in sorted(validator.iter_errors(dict(input)), key=str)]

    def execute(self, input: Any, context: Any = None) -> ToolOutcome:
        """Validate ``input``, call the tool and normalize what happened.

        Cancellation, deadlines and cleanup errors propagate; everything else becomes an outcome.
        """
        problems = self.validate(input)
        if problems:
            message = f"Invalid input for tool {self.tool_name!r}: " + "; ".join(problems[:5])
            return ToolOutcome.failure(message, "validation")
        return self.execute_validated(input, context)

    def execute_validated(
        self, input: Mapping[str, Any], context: Any = None, *, entering: Callable[[], None] | None = None
    ) -> ToolOutcome:
        """Call the tool with input that already passed :meth:`validate`.

        Without a ``context`` (a test or an integration calling the tool directly) the
        tool gets a fresh RunContext, as the spec's ``execute(input, context: RunContext.new)``.
        ``entering`` is called once the input is converted, right before the tool's own
        code runs; what it raises propagates and the tool is not called (the engine
        records there that an ``at_most_once`` call starts).
        """
        prepared = self.prepare(input)
        if isinstance(prepared, ToolOutcome):
            return prepared
        return self.execute_prepared(prepared, context, entering=entering)

    def prepare(self, input: Mapping[str, Any]) -> PreparedInput | ToolOutcome:
        """Convert validated input for ``call``, or the failure the model gets instead.

        This is the last step of validation for a tool with an ``Input`` model: what the
        model refuses is a validation failure, and what one of its validators raises is
        reported like the same error raised by ``call`` (a ToolError's message, or a
        sanitized internal error), so a validator cannot fail the run. The engine runs
        ``before_tool`` only after this, as the spec orders it.
        """
        try:
            return PreparedInput(self._prepare_input(input))
        except ValidationError as exc:
            problems = [describe_model_error(error) for error in exc.errors()]
            message = f"Invalid input for tool {self.tool_name!r}: " + "; ".join(problems[:5])
            return ToolOutcome.failure(message, "validation", exc)
        except _RUN_LEVEL_ERRORS:
            raise
        except Exception as exc:  # noqa: BLE001 - sanitized for the model, kept for the app
            return self._failure_of(exc)

    def execute_prepared(
        self, prepared: PreparedInput, context: Any = None, *, entering: Callable[[], None] | None = None
    ) -> ToolOutcome:
        """Call the tool with input from :meth:`prepare`; see :meth:`execute_validated`."""
        self.context = context if context is not None else RunContext()
        try:
            if entering is not None:
                entering()
            return self._outcome_of_call(prepared.value)
        finally:
            self.context = None

    def _outcome_of_call(self, prepared: Any) -> ToolOutcome:
        """Call the tool with converted input; what it returns or raises, as an outcome."""
        try:
            # Converting the value is part of the tool's call: a value that cannot become
            # content (a bad Tool.Result, an unrenderable object) is the tool's failure,
            # reported to the model like any unexpected exception, not the run's.
            return success_outcome(self._invoke(prepared))
        except _RUN_LEVEL_ERRORS:
            raise
        except (Exception, asyncio.CancelledError) as exc:  # noqa: BLE001 - sanitized for the model, kept for the app
            # asyncio.CancelledError is a BaseException, but out of an async tool it can only be
            # the tool's own: its event loop (asyncio.run) belongs to this call, and cancelling
            # the run goes through the run's token, not that loop.
            return self._failure_of(exc)

    def _failure_of(self, exc: BaseException) -> ToolOutcome:
        """A ToolError's message for the model; any other error only by its class name."""
        if isinstance(exc, ToolError):
            return ToolOutcome.failure(str(exc) or "The tool reported an error.", "tool_error", exc)
        message = f"Tool {self.tool_name!r} failed with an internal error ({type(exc).__name__})."
        return ToolOutcome.failure(message, "unexpected", exc)

    def _prepare_input(self, input: Mapping[str, Any]) -> Any:
        """The input ``call`` receives: an ``Input`` model instance, else a copy of the mapping.

        The model validates in JSON mode, as the arguments arrive: the schema the model was
        sent asks for strings for ``datetime``, ``Enum`` and ``UUID`` fields, which a strict
        model refuses in Python mode. Input that is not JSON (an application calling
        ``execute`` with Python objects) is validated in Python mode.
        """
        model = type(self)._input_model
        if model is None:
            return copy.deepcopy(dict(input))
        try:
            text = json.dumps(dict(input), allow_nan=False)
        except (TypeError, ValueError):
            return model.model_validate(dict(input))
        return model.model_validate_json(text)

    def _invoke(self, input: Any) -> Any:
        if inspect.iscoroutinefunction(self.call):
            return asyncio.run(self.call(input))
        result = self.call(input)
        if inspect.iscoroutine(result):  # e.g. Tool.define with an async implementation
            return asyncio.run(result)
        return result


def success_outcome(value: Any) -> ToolOutcome:
    """Normalize a tool's return value into model-facing content.

    A content block (Text, Image, Document), or a list of them, is sent to the model
    as those blocks ("Content blocks may also accompany a Tool result"); any other
    value becomes one Text block (:func:`render_value`). A ``Tool.Result``'s
    artifacts follow as blocks of their own.
    """
    artifacts: tuple[Artifact, ...] = ()
    if isinstance(value, EndsRun):
        reply = (Text(text=well_formed_text(value.reply)),)
        return ToolOutcome(status="success", content=reply, value=value.value, ends_run=True)
    if isinstance(value, ToolReturn):
        value, artifacts = value.value, value.artifacts
    blocks: list[Any] = list(content_blocks(value) or (Text(text=render_value(value)),))
    blocks.extend(artifact_block(artifact) for artifact in artifacts)
    return ToolOutcome(status="success", content=tuple(blocks), value=value, artifacts=artifacts)


__all__ = [
    "Artifact",
    "Binding",
    "EndsRun",
    "PreparedInput",
    "Tool",
    "ToolOutcome",
    "ToolReturn",
    "success_outcome",
]
