"""JSON forms of what the engine persists: errors, event data, run results.

Live in-process events carry rich objects (a ModelResponse, a Usage, the
exception); the durable event log and other processes see these JSON forms,
and :func:`decode_event_data` turns the well-known keys back into objects.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

from lg_core import errors as errors_mod
from lg_core.datamap import to_json_value
from lg_core.messages import Message
from lg_core.models.request import ModelResponse
from lg_core.result_schema import StructuredResult
from lg_core.usage import Usage


def error_to_dict(error: BaseException, *, include_message: bool = True) -> dict[str, Any]:
    """The stored form of an exception: its class path, message and safe attributes."""
    cls = type(error)
    data: dict[str, Any] = {"class": f"{cls.__module__}:{cls.__qualname__}", "name": cls.__name__}
    data["message"] = str(error) if include_message else ""
    attributes = getattr(error, "_attributes", None)
    if attributes:
        try:
            data["attributes"] = to_json_value(attributes)
        except TypeError:
            pass
    return data


def error_from_dict(data: Mapping[str, Any] | None) -> BaseException | None:
    """Rebuild an exception from :func:`error_to_dict`; unknown classes become ``Error``."""
    if not data:
        return None
    message = data.get("message", "")
    module_name, _, qualname = str(data.get("class", "")).partition(":")
    cls: Any = None
    try:
        cls = importlib.import_module(module_name)
        for part in qualname.split("."):
            cls = getattr(cls, part)
    except (ImportError, AttributeError, ValueError):
        cls = None
    if isinstance(cls, type) and issubclass(cls, BaseException):
        try:
            if issubclass(cls, errors_mod.Error):
                attributes = dict(data.get("attributes") or {})
                if "validation_errors" in attributes:
                    attributes["validation_errors"] = tuple(attributes["validation_errors"])
                return cls(message, **attributes)
            return cls(message)
        except Exception:  # noqa: BLE001 - a class with an unusual constructor
            pass
    return errors_mod.Error(f"{data.get('name', 'Error')}: {message}")


def usage_from(value: Any) -> Usage:
    return value if isinstance(value, Usage) else Usage.from_dict(value)


def response_to_dict(response: ModelResponse) -> dict[str, Any]:
    return {
        "message": response.message.stored_form(),
        "stop_reason": response.stop_reason,
        "usage": response.usage.to_dict(),
        "metadata": _json_metadata(response.metadata),
    }


_FLAT_JSON = (str, int, bool, type(None))


def _json_metadata(metadata: Mapping[str, Any]) -> dict[str, Any]:
    """``to_json_value(dict(metadata))``; a flat dict of str keys and plain values
    (a provider's usual response metadata) is simply copied."""
    if all(type(key) is str and type(value) in _FLAT_JSON for key, value in metadata.items()):
        return dict(metadata)
    return to_json_value(dict(metadata))


def response_from_dict(data: Mapping[str, Any]) -> ModelResponse:
    return ModelResponse(
        message=Message.from_dict(data["message"]),
        stop_reason=data.get("stop_reason", "end_turn"),
        usage=Usage.from_dict(data.get("usage")),
        metadata=data.get("metadata") or {},
    )


_PLAIN = (str, int, float, bool, type(None))


def encode_value(value: Any) -> Any:
    """JSON form of one event data value."""
    kind = type(value)
    if kind in _PLAIN:
        return value
    encoder = _ENCODERS.get(kind)
    if encoder is not None:
        return encoder(value)
    if isinstance(value, BaseException):
        return error_to_dict(value)
    if isinstance(value, Mapping):
        return {str(k): encode_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [encode_value(v) for v in value]
    to_dict = getattr(value, "to_dict", None)
    if callable(to_dict):
        return to_dict()
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json")
    return str(value)


def _encode_dict(value: dict[Any, Any]) -> dict[str, Any]:
    return {str(k): encode_value(v) for k, v in value.items()}


def _encode_sequence(value: list[Any] | tuple[Any, ...]) -> list[Any]:
    return [encode_value(v) for v in value]


# Exact types with a known encoding. Plain dicts, lists and tuples (a tool call's
# input, in every model turn) are found here, before the slower isinstance checks.
_ENCODERS: dict[type, Any] = {
    Usage: Usage.to_dict,
    ModelResponse: response_to_dict,
    Message: Message.stored_form,
    StructuredResult: lambda v: {"schema_name": v.schema_name, "value": v.value},
    dict: _encode_dict,
    list: _encode_sequence,
    tuple: _encode_sequence,
}


def encode_event_data(data: Mapping[str, Any]) -> dict[str, Any]:
    return {str(key): encode_value(value) for key, value in data.items()}


def decode_event_data(data: Mapping[str, Any]) -> dict[str, Any]:
    """Turn well-known keys of a stored event back into objects."""
    decoded = dict(data)
    if isinstance(decoded.get("usage"), Mapping):
        decoded["usage"] = Usage.from_dict(decoded["usage"])
    if isinstance(decoded.get("response"), Mapping):
        decoded["response"] = response_from_dict(decoded["response"])
    if isinstance(decoded.get("error"), Mapping) and "class" in decoded["error"]:
        decoded["error"] = error_from_dict(decoded["error"])
    return decoded


__all__ = [
    "decode_event_data",
    "encode_event_data",
    "encode_value",
    "error_from_dict",
    "error_to_dict",
    "response_from_dict",
    "response_to_dict",
    "usage_from",
]
