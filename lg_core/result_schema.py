"""Structured results: a strict JSON Schema subset, checked twice.

The schema is checked when the Agent class is defined (so a bad schema fails
at import, with a ConfigurationError naming the path), and every returned
value is validated with ``jsonschema`` before it becomes a StructuredResult;
a schema given as a Pydantic model also runs the model's own validation.

Strict means: the top level is an object, and every object sets
``additionalProperties: false`` and lists every property in ``required``. That
is what providers' native structured-output modes accept, so one schema works
for both strategies (provider-native and terminal tool).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import jsonschema
from pydantic import BaseModel, ConfigDict, PydanticUserError, ValidationError

from lg_core.datamap import MAX_JSON_DEPTH, nests_deeper_than
from lg_core.errors import ConfigurationError, ProviderError

Strategy = Literal["auto", "provider", "tool"]
STRATEGIES: tuple[str, ...] = ("auto", "provider", "tool")
ALLOWED_KEYWORDS = frozenset(
    {
        "type",
        "properties",
        "required",
        "additionalProperties",
        "items",
        "enum",
        "const",
        "description",
        "title",
        "minLength",
        "maxLength",
        "pattern",
        "format",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "multipleOf",
        "minItems",
        "maxItems",
        "uniqueItems",
        "anyOf",
        "$ref",
        "$defs",
        "default",
        "examples",
    }
)
_LITERAL_KEYWORDS = frozenset({"enum", "const", "default", "examples"})
_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


class StructuredResult(BaseModel):
    """A validated value together with the schema name that validated it."""

    model_config = ConfigDict(frozen=True)
    schema_name: str
    value: Any


@dataclass(frozen=True)
class ResultSchema:
    """A checked result contract: schema, name, description and strategy."""

    schema: dict[str, Any]
    name: str = "result"
    description: str | None = None
    strategy: Strategy = "auto"
    model: type[BaseModel] | None = None

    def __post_init__(self) -> None:
        # A recursive Pydantic model's schema is a top-level $ref into $defs: providers
        # want the object itself there. One that cannot be resolved stays, for check() to report.
        resolved, problem = root_resolved(self.schema)
        if problem is None:
            object.__setattr__(self, "schema", resolved)

    @classmethod
    def build(cls, declaration: Any, owner: str) -> ResultSchema:
        """Accept a ResultSchema, a dict (optionally with name/description/strategy), or a Pydantic model."""
        if isinstance(declaration, ResultSchema):
            spec = declaration
        elif isinstance(declaration, type) and issubclass(declaration, BaseModel):
            try:
                schema = declaration.model_json_schema()
            except PydanticUserError as exc:
                raise ConfigurationError(f"{owner}.result_schema has no JSON Schema: {exc}") from None
            spec = cls(
                schema=schema,
                name=_snake(declaration.__name__),
                description=(declaration.__doc__ or "").strip() or None,
                model=declaration,
            )
        elif isinstance(declaration, Mapping):
            try:
                data = json.loads(json.dumps(declaration))
            except (TypeError, ValueError) as exc:
                raise ConfigurationError(f"{owner}.result_schema must hold only JSON values: {exc}") from None
            spec = cls(
                schema=data,
                name=data.pop("name", "result"),
                description=data.pop("description", None),
                strategy=data.pop("strategy", "auto"),
            )
        else:
            raise ConfigurationError(
                f"{owner}.result_schema must be a dict, a ResultSchema or a Pydantic model, got {declaration!r}"
            )
        spec.check(owner)
        return spec

    def check(self, owner: str) -> None:
        if self.strategy not in STRATEGIES:
            raise ConfigurationError(
                f"{owner}.result_schema strategy must be one of {STRATEGIES}, got {self.strategy!r}"
            )
        if not isinstance(self.name, str) or not _NAME.fullmatch(self.name):
            raise ConfigurationError(f"{owner}.result_schema name must be 1-64 letters, digits, '_' or '-'")
        _, problem = root_resolved(self.schema)
        if problem is not None:
            raise ConfigurationError(f"{owner}.result_schema: {problem}")
        if self.schema.get("type") != "object":
            wrapped = ""
            if isinstance(self.schema.get("schema"), Mapping):  # Ruby's result_schema(schema, name:) shape
                wrapped = (
                    "; the schema is given flat, its own keys at the top level with an optional 'name', "
                    "not wrapped under a 'schema' key: {'type': 'object', 'properties': {...}, ..., 'name': 'x'}"
                )
            raise ConfigurationError(f"{owner}.result_schema: the top-level type must be 'object'{wrapped}")
        try:
            jsonschema.Draft202012Validator.check_schema(self.schema)
        except jsonschema.SchemaError as exc:
            raise ConfigurationError(f"{owner}.result_schema is not valid JSON Schema: {exc.message}") from None
        problems = list(_strict_problems(self.schema, "$"))
        problems += [
            f"{path} $ref {ref!r} does not resolve inside the schema" for path, ref in unresolved_refs(self.schema)
        ]
        if problems:
            hint = ""
            if self.model is not None:
                hint = (
                    " (for a Pydantic model: set model_config = ConfigDict(extra='forbid') "
                    "and give every field no default)"
                )
            raise ConfigurationError(f"{owner}.result_schema is not strict: {'; '.join(problems[:5])}{hint}")

    def validate(self, value: Any) -> list[str]:
        """Messages describing why ``value`` does not match (empty when it does).

        A schema given as a Pydantic model is also checked by the model itself,
        so its validators (``field_validator``, ``model_validator``, constrained
        types) reject a value as the JSON Schema does: the model is asked to
        repair it, with the validator's message.
        """
        validator = jsonschema.Draft202012Validator(self.schema)
        errors = sorted(validator.iter_errors(value), key=str)
        messages = [f"{_path(e.absolute_path)}: {e.message}" for e in errors]
        if self.model is None:
            return messages
        reported = {_path(e.absolute_path) for e in errors}
        try:
            _instance(self.model, value)
        except ValidationError as exc:
            for error in exc.errors(include_url=False):
                path = _path(error["loc"])
                if path not in reported and error["type"] not in _SCHEMA_CHECKED:
                    messages.append(f"{path}: {_message(error)}")
        return messages

    def output(self, value: Any) -> Any:
        """The application-facing value: a Pydantic instance when the schema came from one.

        ``value`` is the stored JSON form (``StructuredResult.value``); a live run
        and a run rebuilt from the store both build the instance from it, so they
        give the same output. A run only accepts a value that :meth:`validate`
        passed; a stored value the model no longer accepts (its validators
        changed since the run finished) is returned as stored, so the finished
        run can still be loaded and inspected.
        """
        if self.model is None:
            return value
        try:
            return _instance(self.model, value)
        except (TypeError, ValueError):  # ValidationError is a ValueError; TypeError: not a JSON value
            return value

    def tool_name(self) -> str:
        return f"submit_{self.name}"[:64]


def _strict_problems(node: Any, path: str) -> Any:
    if not isinstance(node, Mapping):
        return
    unknown = set(node) - ALLOWED_KEYWORDS
    if unknown:
        yield f"{path} uses unsupported keywords {sorted(unknown)}"
    types = node.get("type")
    is_object = types == "object" or (isinstance(types, list) and "object" in types) or "properties" in node
    if is_object:
        properties = node.get("properties", {})
        if node.get("additionalProperties") is not False:
            yield f"{path} must set additionalProperties: false"
        missing = sorted(set(properties) - set(node.get("required", [])))
        if missing:
            yield f"{path} must list every property in required (missing {missing})"
        for name, child in properties.items():
            yield from _strict_problems(child, f"{path}.{name}")
    if "items" in node:
        yield from _strict_problems(node["items"], f"{path}[]")
    for index, option in enumerate(node.get("anyOf", [])):
        yield from _strict_problems(option, f"{path}.anyOf[{index}]")
    top_level = {key: value for key, value in node.items() if key != "$defs"}
    for name, definition in node.get("$defs", {}).items():
        if definition != top_level:  # else the top level was inlined from it (root_resolved): checked above
            yield from _strict_problems(definition, f"$defs.{name}")


def root_resolved(schema: Any) -> tuple[Any, str | None]:
    """``schema`` with a top-level ``$ref`` replaced by the definition it points to, and
    why not when it cannot be (the schema is then returned as given).

    Pydantic writes a recursive model as ``{"$defs": {"Node": {...}}, "$ref": "#/$defs/Node"}``.
    The definition's keywords move to the top level and ``$defs`` stays, so references
    inside (the recursion) still resolve: the schema accepts the same values, and its top
    level shows ``type: object`` as providers require of tool parameters and result schemas.
    """
    if not isinstance(schema, Mapping) or "$ref" not in schema:
        return schema, None
    resolved: dict[str, Any] = dict(schema)
    followed: list[str] = []
    while "$ref" in resolved:
        ref = resolved.pop("$ref")
        if ref in followed:
            return schema, f"the top-level $ref {ref!r} leads back to itself and never to an object schema"
        followed.append(ref)
        target = _resolve(schema, ref) if isinstance(ref, str) else None
        if not isinstance(target, Mapping):
            return schema, f"the top-level $ref {ref!r} does not resolve to a schema inside the schema"
        clash = sorted(key for key in target if key in resolved and resolved[key] != target[key])
        if clash:
            return (
                schema,
                f"the top-level $ref {ref!r} has keywords beside it that its definition sets differently: {clash}",
            )
        resolved = {**target, **resolved}
    return resolved, None


def unresolved_refs(root: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(path, ref) of every ``$ref`` that is not a JSON pointer into ``root`` itself.

    A remote or dangling reference passes ``check_schema`` but makes every later
    validation raise a referencing error, in the middle of a run.
    """
    found: list[tuple[str, str]] = []

    def walk(node: Any, path: str) -> None:
        if isinstance(node, Mapping):
            ref = node.get("$ref")
            if isinstance(ref, str) and not _resolves(root, ref):
                found.append((path, ref))
            for key, child in node.items():
                if key not in _LITERAL_KEYWORDS:  # values, not schemas: a "$ref" there is data
                    walk(child, f"{path}.{key}")
        elif isinstance(node, list):
            for index, child in enumerate(node):
                walk(child, f"{path}[{index}]")

    walk(root, "$")
    return found


_MISSING = object()


def _resolves(root: Any, ref: str) -> bool:
    return _resolve(root, ref, _MISSING) is not _MISSING


def _resolve(root: Any, ref: str, missing: Any = None) -> Any:
    """The node the local JSON pointer ``ref`` names inside ``root``, else ``missing``."""
    if ref == "#":
        return root
    if not ref.startswith("#/"):
        return missing
    node = root
    for token in ref[2:].split("/"):
        token = token.replace("~1", "/").replace("~0", "~")
        if isinstance(node, Mapping) and token in node:
            node = node[token]
        elif isinstance(node, list) and token.isdigit() and int(token) < len(node):
            node = node[int(token)]
        else:
            return missing
    return node


# Pydantic error types a strict JSON Schema always reports too (every property is
# required, no additional ones): listed once, in the JSON Schema's words.
_SCHEMA_CHECKED = frozenset({"missing", "extra_forbidden"})
_PYDANTIC_PREFIXES = ("Value error, ", "Assertion failed, ")


def _instance(model: type[BaseModel], value: Any) -> BaseModel:
    """``value`` validated by ``model`` in JSON mode, as the provider sent it: a strict
    model takes an ISO date string for a ``datetime`` there, as its JSON Schema says."""
    return model.model_validate_json(json.dumps(value))


def _path(location: Any) -> str:
    """A value's location as the repair message shows it: ``items/0/name`` or ``(root)``."""
    return "/".join(map(str, location)) or "(root)"


def _message(error: Any) -> str:
    """A Pydantic error's message without the prefix it adds to a validator's own."""
    message = str(error["msg"])
    for prefix in _PYDANTIC_PREFIXES:
        if message.startswith(prefix):
            return message[len(prefix) :]
    return message


def _snake(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name).lower()


def parse_json_text(text: str) -> tuple[Any, str | None]:
    """Parse a model's JSON answer, tolerating a fenced code block around it."""
    stripped = text.strip()
    fenced = re.match(r"^```(?:json)?\s*(.*?)\s*```$", stripped, re.DOTALL)
    if fenced:
        stripped = fenced.group(1)
    if not stripped:
        return None, "the response was empty; it must be a JSON object"
    try:
        value = json.loads(stripped, parse_constant=_not_a_json_number, parse_float=_finite_float)
    except json.JSONDecodeError as exc:
        return None, f"the response is not valid JSON ({exc.msg} at position {exc.pos})"
    except ValueError as exc:  # the hooks below, or an integer with too many digits for int()
        return None, f"the response is not valid JSON ({exc})"
    except RecursionError:
        return None, f"the response nests more than {MAX_JSON_DEPTH} levels deep"
    # Deeper values than a run may store would fail validation or the step's commit with a
    # RecursionError; as a problem, the answer gets its repair attempt like any invalid one.
    if nests_deeper_than(value):
        return None, f"the response nests more than {MAX_JSON_DEPTH} levels deep"
    return value, None


def _not_a_json_number(name: str) -> Any:
    """``json.loads`` takes NaN, Infinity and -Infinity, which JSON does not have."""
    raise ValueError(f"{name} is not a JSON number")


def _finite_float(text: str) -> float:
    """A JSON number as a float; one too large for a float (``1e999``) would become infinity."""
    number = float(text)
    if not math.isfinite(number):
        raise ValueError(f"the number {text} is too large to represent")
    return number


def result_strategy(spec: ResultSchema | None, model: Any) -> str | None:
    """How ``model`` returns ``spec``'s result: ``provider``, ``tool``, or None without a schema.

    Checked before a run starts (``Agent.build_run``) and again at each model turn,
    whose model may differ (a fork's model, a per-invocation selection): the spec
    says an unsupported strategy is a ConfigurationError before execution.
    """
    if spec is None:
        return None
    capabilities = model.capabilities
    if spec.strategy == "provider" and not capabilities.native_structured_output:
        raise ConfigurationError(
            f"model {model.target} has no provider-native structured output; use strategy 'tool' or 'auto'"
        )
    if spec.strategy == "tool" and not capabilities.tools:
        raise ConfigurationError(f"model {model.target} does not accept tools; use strategy 'provider' or 'auto'")
    if spec.strategy != "auto":
        return spec.strategy
    if capabilities.native_structured_output:
        return "provider"
    if capabilities.tools:
        return "tool"
    raise ConfigurationError(f"model {model.target} supports neither native structured output nor tools")


def check_tools_accepted(model: Any, tool_names: Iterable[str], owner: str) -> None:
    """ConfigurationError when ``model`` is known not to accept tool definitions and ``owner`` offers some.

    The spec's capabilities exist so tool selection does not rely on guesswork: sending
    the definitions anyway gets a request the provider refuses, or tools the model ignores.
    Unknown capabilities (``known`` false) are not held against a model.
    """
    names = sorted(tool_names)
    if not names:
        return
    try:
        capabilities = model.capabilities
    except ProviderError:  # e.g. a scripted model not registered yet: its first turn reports that
        return
    if capabilities.known and not capabilities.tools:
        raise ConfigurationError(
            f"model {model.target} does not accept tools (its capabilities say tools: false), but {owner} offers "
            f"{', '.join(repr(name) for name in names[:5])}; choose a model that accepts tools, or correct the "
            "connection's capabilities option if it does"
        )


__all__ = [
    "ResultSchema",
    "STRATEGIES",
    "StructuredResult",
    "check_tools_accepted",
    "parse_json_text",
    "result_strategy",
    "root_resolved",
    "unresolved_refs",
]
