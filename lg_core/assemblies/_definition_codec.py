"""How the parts of an AssemblyDefinition are stored: participants, code references and policies as JSON.

A definition is stored with its run so that a resumed run, on any worker, uses the one it
started with. Data (names, routes, bounds, flags) is stored as it is; code cannot be, so
it is stored by reference and imported again:

* a class (an Agent or assembly participant, an exception class in ``retry_on``/``on``, the
  definition's implementation) by its ``module:QualName``, refused when that path does not
  lead back to the same class (a class defined inside a function);
* a condition, input mapper or ``perform`` function by its ``module:QualName`` when that
  imports it back; else, when the callable is the one a named class declares at that place
  (a lambda in ``SupportFlowGraph.edges``), by that class and the place (``edge triage ->
  billing, when``), looked up again in the class when the definition is read. Anything else (a
  lambda given to a builder) is refused, naming where it was declared: write it as a
  module-level function.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from lg_core.assemblies._policy import StepPolicy, checked_policy
from lg_core.errors import ConfigurationError, RunStateError
from lg_core.import_path import import_attribute

FORMAT = 1

# Finds the callable a named implementation class declares at a place: (class, place) -> callable or None.
Locator = Callable[[type, Mapping[str, Any]], Any]


def class_path(cls: type, owner: str) -> str:
    """``module:QualName`` of ``cls``; ConfigurationError when importing it would not give ``cls`` back."""
    path = f"{cls.__module__}:{cls.__qualname__}"
    if "<locals>" in cls.__qualname__ or _imported(path) is not cls:
        raise ConfigurationError(
            f"{owner}: {cls.__qualname__} cannot be named by an import path ({path}); a definition stored with "
            "a run names its classes so other processes can import them: define it at module level"
        )
    return path


def load_class(path: str, owner: str) -> type:
    found = _imported(path)
    if not isinstance(found, type):
        raise RunStateError(f"{owner}: cannot import the class {path!r} a stored assembly definition names")
    return found


def encode_callable(callback: Any, place: Mapping[str, Any], implementation: type, locate: Locator) -> Any:
    """The stored reference to ``callback`` (None stays None) declared at ``place``."""
    if callback is None:
        return None
    qualname = getattr(callback, "__qualname__", "")
    path = f"{getattr(callback, '__module__', '')}:{qualname}"
    if "<" not in qualname and _imported(path) is callback:
        return {"import": path}
    if locate(implementation, place) is callback:
        return {"declared_in": class_path(implementation, describe(place)), "at": dict(place)}
    raise ConfigurationError(
        f"{describe(place)}: {callback!r} is a lambda or a nested function, which a definition stored with a run "
        "cannot name; write it as a module-level function (or declare it on a named Graph, Swarm or Workflow class)"
    )


def decode_callable(stored: Any, locate: Locator) -> Any:
    if stored is None:
        return None
    if "import" in stored:
        found = _imported(stored["import"])
        if found is None:
            raise RunStateError(f"cannot import {stored['import']!r}, which a stored assembly definition names")
        return found
    owner = load_class(stored["declared_in"], describe(stored["at"]))
    found = locate(owner, stored["at"])
    if found is None:
        raise RunStateError(
            f"{stored['declared_in']} no longer declares the {describe(stored['at'])} a stored run uses; "
            "deploy the definition the run started with to resume it"
        )
    return found


def describe(place: Mapping[str, Any]) -> str:
    """``edge triage -> billing, when`` / ``node lookup, input`` / ``perform``: where a callable was declared."""
    return ", ".join(str(item) for item in place.values())


def encode_participant(participant: Any, owner: str) -> dict[str, Any]:
    if isinstance(participant, type):
        return {"class": class_path(participant, owner)}
    return {"definition": participant.to_dict()}


def decode_participant(stored: Mapping[str, Any], owner: str, decode_definition: Callable[[Any], Any]) -> Any:
    if "class" in stored:
        return load_class(stored["class"], owner)
    return decode_definition(stored["definition"])


def encode_policy(policy: StepPolicy, owner: str) -> dict[str, Any]:
    for cls in policy.retry_on:
        class_path(cls, f"{owner}: retry_on")
    return policy.to_dict()


def decode_policy(stored: Mapping[str, Any], owner: str) -> StepPolicy:
    retry_on = [load_class(path, owner) for path in stored.get("retry_on", ())]
    return checked_policy(
        owner,
        timeout=stored.get("timeout"),
        retries=stored.get("retries", 0),
        retry_on=retry_on or None,
        retry_delay=stored.get("retry_delay", 0),
    )


def _imported(path: str) -> Any:
    try:
        return import_attribute(path)
    except (ValueError, ImportError, AttributeError):
        return None


__all__ = [
    "FORMAT",
    "Locator",
    "class_path",
    "decode_callable",
    "decode_participant",
    "decode_policy",
    "describe",
    "encode_callable",
    "encode_participant",
    "encode_policy",
    "load_class",
]
