"""A subagent definition: one kind of agent a parent's model may delegate to.

The parent's model sees each definition's ``kind`` and ``description`` in its
spawn tool, and the manager calls ``factory`` to get the agent that holds a new
conversation. Definitions come from an Agent's ``subagents`` declarations (see
``lg_core.subagents.declarations``) or from a per-run resolver that returns
them; either way they are checked here, when made, so a bad one fails where it
was written instead of in the middle of a parent's turn.

The factory is called with the child's agent path (``/root/review_api``) and
returns the Agent class that runs the conversation. A factory that declares
``accepts_conversation_id=True`` is also given the conversation's durable id as
a second positional argument; one that accepts a ``runtime`` keyword gets the
runtime. A class is returned rather than an instance because a child's turns
run on any worker: what runs a turn must be rebuilt there from the stored
definition, not carried in memory.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from lg_core.errors import ConfigurationError

# A kind is shown to the model and names stored conversations: an agent_id's alphabet and length.
KIND_PATTERN = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")
MAX_DESCRIPTION_CHARS = 1024


@dataclass(frozen=True, slots=True)
class Definition:
    """The model-visible ``kind`` and ``description``, the ``factory``, and the persistence policy.

    ``persist`` takes effect only when the parent run has a session: without one
    a child's conversation lives as long as the parent's invocation.
    """

    kind: str
    description: str
    factory: Callable[..., Any]
    persist: bool = True
    accepts_conversation_id: bool = False

    def __post_init__(self) -> None:
        check_kind(self.kind)
        check_description(self.description, self.kind)
        if not callable(self.factory):
            raise ConfigurationError(
                f"subagent {self.kind!r}: factory must be callable, got {type(self.factory).__name__}"
            )
        for name in ("persist", "accepts_conversation_id"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigurationError(f"subagent {self.kind!r}: {name} must be True or False")
        _check_factory_arity(self.factory, self.kind, self.accepts_conversation_id)

    @property
    def factory_takes_runtime(self) -> bool:
        """Does the factory accept ``runtime=``? Then the manager passes the parent's runtime."""
        try:
            parameters = inspect.signature(self.factory).parameters.values()
        except (TypeError, ValueError):
            return False
        return any(p.name == "runtime" or p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters)


def check_kind(kind: object) -> str:
    """``kind``, checked: 1-64 lowercase letters, digits, '_' or '-', starting with a letter or digit."""
    if not isinstance(kind, str) or not KIND_PATTERN.fullmatch(kind):
        raise ConfigurationError(
            f"a subagent kind must be 1-64 lowercase letters, digits, '_' or '-', starting with a letter or digit; "
            f"got {kind!r}"
        )
    return kind


def check_description(description: object, kind: str) -> str:
    """A non-empty description of at most 1024 characters: the model chooses a kind by it."""
    if not isinstance(description, str) or not description.strip():
        raise ConfigurationError(
            f"subagent {kind!r} needs a description the model can choose it by (declare description= "
            "or give the agent class a description)"
        )
    if len(description) > MAX_DESCRIPTION_CHARS:
        raise ConfigurationError(
            f"subagent {kind!r}: the description is {len(description)} characters; at most {MAX_DESCRIPTION_CHARS}"
        )
    return description


def _check_factory_arity(factory: Callable[..., Any], kind: str, with_conversation_id: bool) -> None:
    """Fail now for a factory that cannot take what the manager will pass it."""
    arguments = ("/root/x", "conversation-id") if with_conversation_id else ("/root/x",)
    try:
        signature = inspect.signature(factory)
    except (TypeError, ValueError):  # a builtin without a signature: accepted as it is
        return
    try:
        signature.bind(*arguments)
    except TypeError:
        wanted = "the agent path and the conversation id" if with_conversation_id else "the agent path"
        raise ConfigurationError(
            f"subagent {kind!r}: the factory must accept {wanted} as positional arguments; its signature is {signature}"
        ) from None


__all__ = ["KIND_PATTERN", "MAX_DESCRIPTION_CHARS", "Definition", "check_description", "check_kind"]
