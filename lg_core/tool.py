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
import math
import re
import unicodedata
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any, ClassVar, Literal

import jsonschema
from pydantic import BaseModel, PydanticUserError, ValidationError

from lg_core.callbacks import awaited
from lg_core.content import Document, Image, Text, well_formed_text
from lg_core.datamap import deep_freeze, thaw
from lg_core.errors import (
    CONTROL_FLOW_ERRORS,
    AbstractMethodError,
    CleanupError,
    ConfigurationError,
    ToolError,
)
from lg_core.models.request import ToolSpecification
from lg_core.result_schema import root_resolved, unresolved_refs
from lg_core.run_context import RunContext

NAME_PATTERN = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
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
            raise TypeError(f"Artifact.media_type must be a non-empty MIME type string, got {type(self.media_type).__name__}")
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


def _normalized_schema(schema: Mapping[str, Any], owner: str) -> dict[str, Any]:
    """A plain JSON copy of ``schema`` with string keys (it may be another tool's frozen schema)."""
    try:
        return json.loads(json.dumps(thaw(schema)))
    except (TypeError, ValueError) as exc:
        raise ConfigurationError(f"{owner}.input_schema must hold only JSON values: {exc}") from None


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
class ToolOutcome:
    """The normalized result of one execution, for the model and the application."""

    status: Literal["success", "error"]
    content: tuple[Any, ...]
    value: Any = None
    artifacts: tuple[Artifact, ...] = ()
    error: BaseException | None = None
    error_kind: str | None = None

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
        _refuse_shadowed_bindings(cls)
        if "tool_name" not in vars(cls):
            cls.tool_name = _derived_tool_name(cls)
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
            cls.available_if = staticmethod(function)  # type: ignore[assignment]
        if "call" in vars(cls):
            _check_call(cls, vars(cls)["call"])
        if "input_schema" in vars(cls) or "Input" in vars(cls):
            cls._compile_schema()

    @classmethod
    def _compile_schema(cls) -> None:
        schema: Any = cls.input_schema
        model = cls.Input if "Input" in vars(cls) else None
        if model is not None and "input_schema" in vars(cls):
            raise ConfigurationError(
                f"{cls.__qualname__} declares both Input and input_schema; keep one (input_schema may be the Pydantic model itself)"
            )
        if model is not None and not (isinstance(model, type) and issubclass(model, BaseModel)):
            raise ConfigurationError(
                f"{cls.__qualname__}.Input must be a Pydantic model class, got {model!r}; "
                "a JSON Schema dict goes in input_schema"
            )
        if isinstance(schema, type) and issubclass(schema, BaseModel):
            model, schema = schema, None
        if model is not None:
            try:
                schema = model.model_json_schema()
            except PydanticUserError as exc:  # a field type with no JSON Schema (a Callable, an arbitrary class)
                raise ConfigurationError(f"{cls.__qualname__}'s input model {model.__qualname__} has no JSON Schema: {str(exc).splitlines()[0]}") from None
        if schema is None or (isinstance(schema, Mapping) and not schema):
            schema = {"type": "object"}
        if not isinstance(schema, Mapping):
            raise ConfigurationError(
                f"{cls.__qualname__}.input_schema must be a dict or a Pydantic model, got {type(schema).__name__}"
            )
        schema, problem = root_resolved(_normalized_schema(schema, cls.__qualname__))
        if problem is not None:  # a recursive Pydantic model's schema is a top-level $ref
            raise ConfigurationError(f"{cls.__qualname__}.input_schema: {problem}")
        if schema.get("type") != "object":
            raise ConfigurationError(f"{cls.__qualname__}.input_schema must describe an object (type: object)")
        try:
            jsonschema.Draft202012Validator.check_schema(schema)
        except jsonschema.SchemaError as exc:
            raise ConfigurationError(f"{cls.__qualname__}.input_schema is not valid JSON Schema: {exc.message}") from None
        dangling = [f"{path} $ref {ref!r}" for path, ref in unresolved_refs(schema)]
        if dangling:  # else every call of the tool would fail the run with a referencing error
            raise ConfigurationError(
                f"{cls.__qualname__}.input_schema: {'; '.join(dangling[:5])} does not resolve inside the schema"
            )
        # The validator keeps its own plain copy; what the class shows (input_schema,
        # specification) is deeply frozen, as the spec's, so no caller (a before_model
        # callback editing request.tools) can change what later calls accept.
        cls._validator = jsonschema.Draft202012Validator(schema)
        cls._schema = cls.input_schema = deep_freeze(schema)  # a copy: the validator's stays plain
        cls._input_model = model

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
        return [_describe(error) for error in sorted(validator.iter_errors(dict(input)), key=str)]

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
            problems = [_describe_pydantic(error) for error in exc.errors()]
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


def takes_arguments(function: Callable[..., Any], count: int) -> bool:
    """Whether ``function`` can be called with ``count`` positional arguments (True when unknowable)."""
    try:
        inspect.signature(function).bind(*([None] * count))
    except TypeError:
        return False
    except ValueError:  # a builtin without a signature
        return True
    return True


def _check_call(cls: type, call: Any) -> None:
    """``call`` must take the input: a wrong signature would fail every call, reported to the model."""
    if isinstance(call, staticmethod):
        function, count = call.__func__, 1
    elif isinstance(call, classmethod):
        function, count = call.__func__, 2
    else:
        function, count = call, 2
    if not callable(function) or not takes_arguments(function, count):
        raise ConfigurationError(f"{cls.__qualname__}.call must be a method taking the input, `def call(self, input)`, got {call!r}")


def success_outcome(value: Any) -> ToolOutcome:
    """Normalize a tool's return value into model-facing content.

    A content block (Text, Image, Document), or a list of them, is sent to the model
    as those blocks ("Content blocks may also accompany a Tool result"); any other
    value becomes one Text block (:func:`render_value`). A ``Tool.Result``'s
    artifacts follow as blocks of their own.
    """
    artifacts: tuple[Artifact, ...] = ()
    if isinstance(value, ToolReturn):
        value, artifacts = value.value, value.artifacts
    blocks: list[Any] = list(_content_blocks(value) or (Text(text=render_value(value)),))
    blocks.extend(_artifact_block(artifact) for artifact in artifacts)
    return ToolOutcome(status="success", content=tuple(blocks), value=value, artifacts=artifacts)


_BLOCK_TYPES = (Text, Image, Document)


def _content_blocks(value: Any) -> tuple[Any, ...] | None:
    """The blocks ``value`` is, when it is a content block or a non-empty list of them; else None.

    Rendered as text instead, a block's bytes failed JSON serialization and the
    model was told the tool had an internal error. A list mixing blocks with other
    values is refused: its image bytes would otherwise reach the model as text.
    """
    if isinstance(value, _BLOCK_TYPES):
        return (_well_formed(value),)
    if not isinstance(value, (list, tuple)) or not any(isinstance(item, _BLOCK_TYPES) for item in value):
        return None
    if not all(isinstance(item, _BLOCK_TYPES) for item in value):
        raise TypeError(
            "a tool returned a list mixing content blocks with other values; return only "
            "content blocks (wrap text in Text(text=...)) or only plain values"
        )
    return tuple(_well_formed(item) for item in value)


def _well_formed(block: Any) -> Any:
    """``block``, with a Text block's lone surrogates replaced as in :func:`render_value`."""
    if isinstance(block, Text) and well_formed_text(block.text) != block.text:
        return Text(text=well_formed_text(block.text))
    return block


def render_value(value: Any) -> str:
    """The text the model sees for a tool value.

    The spec: "Hashes and arrays returned by a tool are JSON-encoded; other values
    become text." Strings stay as they are, mappings, sequences and Pydantic models
    are JSON, None is empty and booleans are ``true``/``false`` (as JSON and the spec's
    Ruby write them); anything else is ``str(value)`` (a date reads ``2024-01-02``).
    The JSON is always valid, whatever the values inside (:func:`_json_ready`):
    NaN and infinities become ``null`` (as Pydantic writes them), bytes are decoded
    as UTF-8 with U+FFFD for invalid sequences (bytes returned alone too), sets
    become sorted lists and other values their ``str``.
    Lone surrogates become U+FFFD (:func:`lg_core.content.well_formed_text`).
    """
    return well_formed_text(_rendered(value))


def _rendered(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, BaseModel):
        try:
            return value.model_dump_json()
        except ValueError:  # PydanticSerializationError: bytes that are not UTF-8, say
            return json.dumps(_json_ready(value), ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (builtins.bytes, bytearray, memoryview)):
        return _decoded(value)
    if isinstance(value, (Mapping, list, tuple, set, frozenset)):
        return json.dumps(_json_ready(value), ensure_ascii=False, allow_nan=False)
    return str(value)


def _json_ready(value: Any, path: tuple[int, ...] = ()) -> Any:
    """``value`` as plain JSON data that ``json.dumps(..., allow_nan=False)`` accepts.

    ``path`` holds the ids of the containers above ``value``: a container that holds
    itself is written as the text ``"<circular reference>"`` at the repeat.
    """
    if value is None or isinstance(value, (str, int)):  # bool is an int
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, (builtins.bytes, bytearray, memoryview)):
        return _decoded(value)
    if isinstance(value, BaseModel):
        return _json_ready(_model_data(value), path)
    if not isinstance(value, (Mapping, list, tuple, set, frozenset)):
        return str(value)  # a date, a Decimal, an enum member
    if id(value) in path:
        return "<circular reference>"
    inner = (*path, id(value))
    if isinstance(value, Mapping):
        return {_json_key(key): _json_ready(item, inner) for key, item in value.items()}
    items = sorted(value, key=str) if isinstance(value, (set, frozenset)) else value
    return [_json_ready(item, inner) for item in items]


def _json_key(key: Any) -> Any:
    """A key ``json.dumps`` writes as JSON writes it (str, int, bool, None, finite float), else its ``str``."""
    if key is None or isinstance(key, (str, int)) or (isinstance(key, float) and math.isfinite(key)):
        return key
    return str(key)


def _model_data(model: BaseModel) -> Any:
    """A Pydantic model as data: JSON mode (dates as ISO text), else Python mode for what JSON mode refuses."""
    try:
        return model.model_dump(mode="json")
    except ValueError:  # bytes that are not UTF-8 (UnicodeDecodeError, PydanticSerializationError)
        return model.model_dump()


def _decoded(data: builtins.bytes | bytearray | memoryview) -> str:
    return builtins.bytes(data).decode("utf-8", errors="replace")


def _artifact_block(artifact: Artifact) -> Any:
    label = artifact.name or "artifact"
    data = artifact.data
    if data is None:
        # A deferred reference is the application's (a bucket key, a signed URL): the spec keeps
        # it out of diagnostics and treats it as no proof of access, so the model learns only that
        # the artifact exists. A tool that wants the model to cite it puts the id in its value.
        return Text(text=f"[artifact {label} ({artifact.media_type}) is stored by the application and not included here]")
    if artifact.media_type.startswith("image/"):
        return Image(data=data, media_type=artifact.media_type, name=artifact.name)
    return Document(data=data, media_type=artifact.media_type, name=label)


def _describe_pydantic(error: Mapping[str, Any]) -> str:
    where = "/".join(str(part) for part in error.get("loc", ()))
    return f"{where}: {error.get('msg')}" if where else str(error.get("msg"))


def _describe(error: jsonschema.ValidationError) -> str:
    where = "/".join(str(part) for part in error.absolute_path)
    return f"{where}: {error.message}" if where else error.message


# What a tool reads from its run-scoped Binding (Tool.agent ... Tool.idempotency_key).
_BINDING_ACCESSORS = ("agent", "run", "runtime", "model", "workspace", "sandbox", "idempotency_key")
# Run-scoped objects the spec configures that this project does not build yet, with what the declaration
# would leave the tool doing: running in the worker's process, with the process's access.
_NOT_SUPPORTED_YET = {"sandbox": "sandboxes", "workspace": "workspaces"}


def _refuse_shadowed_bindings(cls: type[Tool]) -> None:
    """A class attribute named like a binding accessor fails at class definition.

    It would replace the accessor, so the tool would read its own value instead of
    the run's. For ``sandbox`` and ``workspace`` it reads as a declaration
    (``sandbox = {"network": "none"}``) that nothing enforces: the tool would run in
    the worker's process with all of its access, so it is refused as unsupported.
    A property (an accessor written on purpose) is left alone.
    """
    for name in _BINDING_ACCESSORS:
        if name not in vars(cls) or isinstance(vars(cls)[name], property):
            continue
        if name in _NOT_SUPPORTED_YET:
            raise ConfigurationError(
                f"{cls.__qualname__} declares {name} = ..., but {_NOT_SUPPORTED_YET[name]} are not supported yet: "
                f"nothing would enforce it, and the tool would run in the worker's process with all of its access. "
                f"Remove the {name} declaration; isolate the work inside call() yourself if it needs isolation"
            )
        raise ConfigurationError(
            f"{cls.__qualname__}.{name} would hide the tool's run-scoped {name} (self.{name} comes from its binding); "
            "give the class attribute another name"
        )


def _derived_tool_name(cls: type) -> str:
    """The default tool_name of ``cls``; a name the class cannot give is refused, asking for ``tool_name``.

    Without this the error quoted a ``tool_name`` the user never set.
    """
    name = default_tool_name(cls.__name__)
    if not NAME_PATTERN.fullmatch(name):
        raise ConfigurationError(
            f"{cls.__qualname__}: the tool_name derived from the class name, {name!r}, is not valid "
            "(1-64 letters, digits, '_' or '-'); set tool_name = '...' on the class"
        )
    return name


def default_tool_name(class_name: str) -> str:
    """``HelpCenterLookupTool`` -> ``help_center_lookup``; ``RésuméTool`` -> ``resume``."""
    return underscored_name(class_name, "tool")


def underscored_name(class_name: str, suffix: str) -> str:
    """``class_name`` in snake case without its ``_suffix``: the default tool_name and agent_id.

    Accented Latin letters lose their accents first (``RésuméTool`` -> ``resume``),
    as a declared name must be ASCII; the suffix was kept, and the name refused,
    when a non-ASCII letter hid the word boundary. Letters with no ASCII form stay,
    and the caller refuses the name, asking for an explicit one.
    """
    decomposed = unicodedata.normalize("NFKD", class_name)
    ascii_name = "".join(char for char in decomposed if not unicodedata.combining(char))
    snake = re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", ascii_name).lower()
    ending = f"_{suffix}"
    return snake[: -len(ending)] if snake.endswith(ending) and snake != ending else snake


def default_class_name(name: str) -> str:
    return "".join(part.capitalize() for part in re.split(r"[_\-]+", name) if part) or "Anonymous"


__all__ = [
    "Artifact",
    "Binding",
    "PreparedInput",
    "Tool",
    "ToolOutcome",
    "ToolReturn",
    "default_tool_name",
    "render_value",
    "success_outcome",
    "takes_arguments",
]
