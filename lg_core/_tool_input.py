"""A Tool's input: its JSON Schema, compiled when the class is defined, and the messages
the model gets for arguments that do not match it (validation failures go back to the
model so it can correct the call)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, cast

import jsonschema
from pydantic import BaseModel, PydanticUserError

from lg_core.datamap import deep_freeze, thaw
from lg_core.errors import ConfigurationError
from lg_core.result_schema import root_resolved, unresolved_refs


def compiled_input_schema(
    owner: str, schema: Any, model: Any, *, declares_schema: bool
) -> tuple[jsonschema.Draft202012Validator, Mapping[str, Any], type[BaseModel] | None]:
    """The validator, the schema the class shows and the input model of a Tool class ``owner``
    declaring ``schema`` (its input_schema, when ``declares_schema``) and ``model`` (its Input).

    A schema that cannot validate arguments (not an object, not valid JSON Schema, a ``$ref``
    that resolves nowhere) is a ConfigurationError here, not a failure of every call.
    """
    if model is not None and declares_schema:
        raise ConfigurationError(
            f"{owner} declares both Input and input_schema; keep one (input_schema may be the Pydantic model itself)"
        )
    if model is not None and not (isinstance(model, type) and issubclass(model, BaseModel)):
        raise ConfigurationError(
            f"{owner}.Input must be a Pydantic model class, got {model!r}; a JSON Schema dict goes in input_schema"
        )
    if isinstance(schema, type) and issubclass(schema, BaseModel):
        model, schema = schema, None
    if model is not None:
        try:
            schema = model.model_json_schema()
        except PydanticUserError as exc:  # a field type with no JSON Schema (a Callable, an arbitrary class)
            raise ConfigurationError(
                f"{owner}'s input model {model.__qualname__} has no JSON Schema: {str(exc).splitlines()[0]}"
            ) from None
    if schema is None or (isinstance(schema, Mapping) and not schema):
        schema = {"type": "object"}
    if not isinstance(schema, Mapping):
        raise ConfigurationError(
            f"{owner}.input_schema must be a dict or a Pydantic model, got {type(schema).__name__}"
        )
    schema, problem = root_resolved(normalized_schema(schema, owner))
    if problem is not None:  # a recursive Pydantic model's schema is a top-level $ref
        raise ConfigurationError(f"{owner}.input_schema: {problem}")
    if schema.get("type") != "object":
        raise ConfigurationError(f"{owner}.input_schema must describe an object (type: object)")
    try:
        jsonschema.Draft202012Validator.check_schema(schema)
    except jsonschema.SchemaError as exc:
        raise ConfigurationError(f"{owner}.input_schema is not valid JSON Schema: {exc.message}") from None
    dangling = [f"{path} $ref {ref!r}" for path, ref in unresolved_refs(schema)]
    if dangling:  # else every call of the tool would fail the run with a referencing error
        raise ConfigurationError(f"{owner}.input_schema: {'; '.join(dangling[:5])} does not resolve inside the schema")
    # The validator keeps its own plain copy; what the class shows (input_schema,
    # specification) is deeply frozen, as the spec's, so no caller (a before_model
    # callback editing request.tools) can change what later calls accept.
    return jsonschema.Draft202012Validator(schema), deep_freeze(schema), model


def normalized_schema(schema: Mapping[str, Any], owner: str) -> dict[str, Any]:
    """A plain JSON copy of ``schema`` with string keys (it may be another tool's frozen schema)."""
    try:
        return cast(dict[str, Any], json.loads(json.dumps(thaw(schema))))
    except (TypeError, ValueError) as exc:
        raise ConfigurationError(f"{owner}.input_schema must hold only JSON values: {exc}") from None


def describe_model_error(error: Mapping[str, Any]) -> str:
    where = "/".join(str(part) for part in error.get("loc", ()))
    return f"{where}: {error.get('msg')}" if where else str(error.get("msg"))


def describe_schema_error(error: jsonschema.ValidationError) -> str:
    where = "/".join(str(part) for part in error.absolute_path)
    return f"{where}: {error.message}" if where else error.message


__all__ = ["compiled_input_schema", "describe_model_error", "describe_schema_error", "normalized_schema"]
