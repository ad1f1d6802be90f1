"""Agent paths: where a delegated conversation sits beneath the agent that started it.

Every delegated conversation gets a stable path under ``/root`` (``/root/review_api``,
``/root/review_api/check_docs``), so logs, events and stored metadata show which
agent asked for which work. The names in a path are chosen by a model (the task
name it gives a spawned subagent), so they are checked strictly here: lowercase
letters, digits and underscores, at most 40 characters. A name that fails
raises ``InvocationError``, whose message the manager hands back to the model.
"""

from __future__ import annotations

import re

from lg_core.errors import InvocationError

ROOT = "/root"
MAX_NAME_CHARS = 40
# Bounds a path a chain of delegations can build: each level is a model-chosen name.
MAX_DEPTH = 8

_NAME = re.compile(r"[a-z0-9_]+")


def validate_name(name: object) -> str:
    """``name`` (one model-chosen task name), checked: 1-40 lowercase letters, digits or underscores."""
    if not isinstance(name, str):
        raise InvocationError(f"a task name must be a string, got {type(name).__name__}")
    if not name:
        raise InvocationError("a task name must not be empty")
    if len(name) > MAX_NAME_CHARS:
        raise InvocationError(f"task name {name[:MAX_NAME_CHARS]!r}... is longer than {MAX_NAME_CHARS} characters")
    if not _NAME.fullmatch(name):
        raise InvocationError(
            f"task name {name!r} may contain only lowercase letters, digits and underscores (e.g. 'review_api')"
        )
    return name


def validate(path: object) -> str:
    """``path`` unchanged once it is an absolute agent path: ``/root`` then valid names, at most 8 deep."""
    if not isinstance(path, str):
        raise InvocationError(f"an agent path must be a string, got {type(path).__name__}")
    if path != ROOT and not path.startswith(ROOT + "/"):
        raise InvocationError(f"agent path {path[:80]!r} must start at {ROOT!r}")
    names = path[len(ROOT) + 1 :].split("/") if path != ROOT else []
    if len(names) > MAX_DEPTH:
        raise InvocationError(f"agent path {path[:80]!r}... is deeper than {MAX_DEPTH} delegations")
    for name in names:
        validate_name(name)
    return path


def join(parent: str, name: str) -> str:
    """The path of ``name`` directly beneath ``parent``, both checked."""
    return validate(f"{validate(parent)}/{validate_name(name)}")


def immediate_child(path: str, parent: str) -> bool:
    """Is ``path`` exactly one level beneath ``parent``? (Both must be valid paths.)"""
    validate(path)
    validate(parent)
    head, _, name = path.rpartition("/")
    return head == parent and bool(name)


class AgentPath:
    """The spec's spelling, ``AgentPath.join("/root", "review_api")``: the functions above as one namespace."""

    ROOT = ROOT
    validate_name = staticmethod(validate_name)
    validate = staticmethod(validate)
    join = staticmethod(join)
    immediate_child = staticmethod(immediate_child)


__all__ = ["AgentPath", "MAX_DEPTH", "MAX_NAME_CHARS", "ROOT", "immediate_child", "join", "validate", "validate_name"]
