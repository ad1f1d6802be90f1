"""JSON forms of what the engine persists: errors, event data, run results.

Live in-process events carry rich objects (a ModelResponse, a Usage, the
exception); the durable event log and other processes see these JSON forms,
and :func:`decode_event_data` turns the well-known keys back into objects.

A stored error names its class (``module:QualName``), but the store and the
broker are not trusted to choose code: a forged row or Redis event could name
any module, and importing it runs it. So :func:`error_from_dict` imports
nothing. It rebuilds a class from an allow-list: LittleGhost's own errors (the
:mod:`lg_core.errors` hierarchy and the project's subclasses of it), Python's
built-in exceptions, and the classes the application registered with
:func:`register_error_class`. Any other class becomes an
:class:`~lg_core.errors.Error` whose message starts with the class's name.
"""

from __future__ import annotations

import builtins
import threading
from collections.abc import Iterator, Mapping
from typing import Any, TypeVar, cast

from lg_core import errors as errors_mod
from lg_core.datamap import to_json_value
from lg_core.messages import Message
from lg_core.models.request import ModelResponse
from lg_core.result_schema import StructuredResult
from lg_core.usage import Usage


def error_to_dict(error: BaseException, *, include_message: bool = True) -> dict[str, Any]:
    """The stored form of an exception: its class path, message and safe attributes."""
    cls = type(error)
    data: dict[str, Any] = {"class": class_path(cls), "name": cls.__name__}
    data["message"] = str(error) if include_message else ""
    attributes = getattr(error, "_attributes", None)
    if attributes:
        try:
            data["attributes"] = to_json_value(attributes)
        except TypeError:
            pass
    return data


E = TypeVar("E", bound=type[Exception])
PROJECT_PACKAGES = frozenset({"lg_core", "lg_workers", "lg_scheduler"})  # whose Error subclasses decode unregistered
_registered: dict[str, type[Exception]] = {}
_registry_lock = threading.Lock()


def class_path(cls: type) -> str:
    """How a stored error names its class: ``module:QualName``."""
    return f"{cls.__module__}:{cls.__qualname__}"


def register_error_class(cls: E) -> E:
    """Let a stored or broker error of class ``cls`` decode as ``cls`` (see the module docstring).

    An application's own exception classes decode as themselves only once registered,
    in the process that reads them: call it where the class is defined (it returns
    ``cls``, so it also serves as a class decorator), so that importing the application
    (``lg worker --import``, ``LG_IMPORTS``) registers it. Until then such an error reads
    back as ``Error("<ClassName>: <message>")``.
    """
    if not (isinstance(cls, type) and issubclass(cls, Exception)):
        raise TypeError(f"register_error_class takes an exception class, got {cls!r}")
    with _registry_lock:
        _registered[class_path(cls)] = cls
    return cls


def _allowed_class(path: str) -> type[BaseException] | None:
    """The class ``path`` names if it is on the allow-list; never imports anything."""
    with _registry_lock:
        registered = _registered.get(path)
    if registered is not None:
        return registered
    module, _, qualname = path.partition(":")
    if module == "builtins":
        found = getattr(builtins, qualname, None)
        return found if isinstance(found, type) and issubclass(found, Exception) else None
    return next((cls for cls in _project_errors() if class_path(cls) == path), None)


def _project_errors() -> Iterator[type[BaseException]]:
    """The control-flow errors and every loaded subclass of Error that one of PROJECT_PACKAGES defines."""
    yield from errors_mod.CONTROL_FLOW_ERRORS
    pending: list[type] = [errors_mod.Error]
    while pending:
        cls = pending.pop()
        if cls.__module__.partition(".")[0] in PROJECT_PACKAGES:
            yield cls
        pending.extend(cls.__subclasses__())


def error_from_dict(data: Mapping[str, Any] | None) -> BaseException | None:
    """Rebuild an exception from :func:`error_to_dict`, from the allow-list only (see the module
    docstring); any other class, or one that cannot be rebuilt, becomes ``Error`` naming it."""
    if not data:
        return None
    message = str(data.get("message", ""))
    path = str(data.get("class", ""))
    cls = _allowed_class(path)
    if cls is not None:
        try:
            return _rebuilt(cls, message, data.get("attributes"))
        except Exception:  # noqa: BLE001 - a class with an unusual constructor
            pass
    name = data.get("name") or path.rpartition(":")[2] or "Error"
    return errors_mod.Error(f"{name}: {message}")


def _rebuilt(cls: type[BaseException], message: str, attributes: Any) -> BaseException:
    """``cls(message)``, with the stored attributes for an Error (none that is private: ``_attributes``...)."""
    if not issubclass(cls, errors_mod.Error):
        return cls(message)
    kept = {str(name): value for name, value in dict(attributes or {}).items() if not str(name).startswith("_")}
    if "validation_errors" in kept:
        kept["validation_errors"] = tuple(kept["validation_errors"])
    return cls(message, **kept)


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
    return cast(dict[str, Any], to_json_value(dict(metadata)))


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
    "PROJECT_PACKAGES",
    "class_path",
    "decode_event_data",
    "encode_event_data",
    "encode_value",
    "error_from_dict",
    "error_to_dict",
    "register_error_class",
    "response_from_dict",
    "response_to_dict",
    "usage_from",
]
