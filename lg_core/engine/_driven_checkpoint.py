"""Frames whose loop their entrypoint class drives: a Graph's nodes, not an Agent's model turns.

The engine commits every frame the same way (optimistic version, one transaction
per step, the step rows as the outbox), but only an Agent's frame is a
conversation it knows how to advance. A frame of another kind (``graph``) holds a
``DrivenCheckpoint``: the few fields every ending and the frame cache read (phase,
usage, working state) plus ``data``, which only its entrypoint class reads and
writes. The engine never imports that class's package: it calls

* ``entrypoint_class.driven_start(run) -> DrivenStart`` when the run starts, and
* ``entrypoint_class.step_body(scope) -> StepBody`` for each of its steps (the
  ``graph_node`` kind, lg_core.engine.graph_nodes),

so an assembly's rules stay with the assembly while its steps are durable,
claimed, leased and committed exactly as an Agent's are. The public face of
this module, with the step's scope such a class works with, is
``lg_core.engine.driven_frames``.

``DrivenCheckpoint`` extends ``AgentCheckpoint`` so that the code shared by
every frame (endings, the cache, the committer) reads the same attributes
without a test of the frame's kind on the Agent's path. Three of them are the
engine's and outlive every checkpoint the entrypoint class writes
(:func:`next_checkpoint` carries them): ``session`` (the session's size when
the run opened it, None until then; engine/_opening.py), ``message_count``
(the frame's messages: the history the opening loaded and the caller's
message) and ``history_epoch`` (bumped by each retry, which also gives the
retried steps fresh child runs, lg_core.assemblies.child_runs).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from lg_core.engine._checkpoint import FORMAT_VERSION, AgentCheckpoint
from lg_core.store import NewStep

DRIVEN_PHASE = "driven"  # never the Agent's "opening": a driven frame is opened by its first step (below)


@dataclass(slots=True)
class DrivenCheckpoint(AgentCheckpoint):
    """A driven frame's checkpoint: the shared fields and ``data``, owned by the entrypoint class."""

    data: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "v": FORMAT_VERSION,
            "driven": True,
            "phase": self.phase,
            "usage": dict(self.usage),
            "state": self.state,
            "last_text": self.last_text,
            "data": self.data,
            "session": self.session,
            "message_count": self.message_count,
            "history_epoch": self.history_epoch,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DrivenCheckpoint:
        return cls(
            phase=data.get("phase", DRIVEN_PHASE),
            usage=dict(data.get("usage") or {}),
            state=data.get("state") or {},
            last_text=data.get("last_text", ""),
            data=data.get("data") or {},
            session=data.get("session"),
            message_count=int(data.get("message_count", 0)),
            history_epoch=int(data.get("history_epoch", 0)),
        )

    def copy(self) -> DrivenCheckpoint:
        """A copy whose ``data`` the caller replaces wholesale (never mutates in place)."""
        return DrivenCheckpoint(
            phase=self.phase,
            usage=dict(self.usage),
            state=self.state,
            last_text=self.last_text,
            data=self.data,
            session=self.session,
            message_count=self.message_count,
            history_epoch=self.history_epoch,
        )


def next_checkpoint(
    previous: AgentCheckpoint, *, phase: str, usage: dict[str, int], data: dict[str, Any]
) -> DrivenCheckpoint:
    """The frame's next checkpoint: the entrypoint class's fields replaced, the engine's own carried
    (working state, session, message count, history epoch), so no commit of the class drops them."""
    return DrivenCheckpoint(
        phase=phase,
        usage=usage,
        state=previous.state,
        data=data,
        session=previous.session,
        message_count=previous.message_count,
        history_epoch=previous.history_epoch,
    )


def checkpoint_of(frame_kind: str, stored: dict[str, Any]) -> AgentCheckpoint:
    """The checkpoint object of a stored frame: an Agent's conversation, else a driven frame's."""
    if frame_kind == "agent":
        return AgentCheckpoint.from_dict(stored)
    return DrivenCheckpoint.from_dict(stored)


@dataclass(frozen=True, slots=True)
class DrivenStart:
    """How a driven run starts: its run and frame kind, first checkpoint and step, and the id its events name."""

    kind: str  # lg_runs.kind and lg_frames.kind, e.g. "graph"
    checkpoint: DrivenCheckpoint
    first: NewStep
    entrypoint_id: str  # what invocation_start names as agent_id (the assembly's id)


__all__ = [
    "DRIVEN_PHASE",
    "DrivenCheckpoint",
    "DrivenStart",
    "checkpoint_of",
    "next_checkpoint",
]
