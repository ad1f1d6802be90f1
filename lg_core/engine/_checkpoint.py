"""The agent loop's checkpoint: everything needed to continue a conversation.

It is written with every step, so it stays small and bounded: counters, the
tool calls of the current turn, usage and the working state. The conversation
itself lives in the append-only ``messages`` table.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, cast

from lg_core.datamap import to_json_value
from lg_core.errors import ConfigurationError

FORMAT_VERSION = 1


@dataclass(slots=True)
class PendingTool:
    """One tool call of the current turn and where it stands."""

    id: str
    name: str
    key: str
    exclusive: bool = False
    status: str = "scheduled"  # scheduled | waiting (exclusive, behind another) | done
    input: dict[str, Any] | None = None  # kept only while waiting; scheduled calls carry it on their step row


@dataclass(slots=True)
class AgentCheckpoint:
    turn: int = 0
    phase: str = "model"  # opening (history not loaded yet, see engine/_opening.py) | model | tools | done
    message_count: int = 0
    model_calls: int = 0
    tool_calls_total: int = 0
    repairs: int = 0
    # The next model turn is the structured result's repair turn: it offers only the way to answer.
    repairing: bool = False
    pending: list[PendingTool] = field(default_factory=list)
    usage: dict[str, int] = field(default_factory=dict)
    state: dict[str, Any] = field(default_factory=dict)
    last_text: str = ""
    session: dict[str, int] | None = (
        None  # {"count", "skip"}: the session's size at opening, where the run's turn starts
    )
    # Bumped each time a retry cuts the frame's messages back: messages cached under
    # an older epoch may have been replaced at the same positions (engine/_frames.py).
    history_epoch: int = 0
    # Tool-loop counts ({signature: [result digest, count]}, lg_core/tool_loops.py); replaced wholesale.
    tool_loops: dict[str, list[Any]] = field(default_factory=dict)
    # The subagent manager's ledger (lg_core.subagents.ledger), for an agent that declares subagents;
    # replaced wholesale by the commit of the step that changed it, never mutated in place.
    subagents: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        # Written by hand: dataclasses.asdict deep-copies recursively and was the
        # largest single cost of a step in the engine benchmark.
        data = {
            "v": FORMAT_VERSION,
            "turn": self.turn,
            "phase": self.phase,
            "message_count": self.message_count,
            "model_calls": self.model_calls,
            "tool_calls_total": self.tool_calls_total,
            "repairs": self.repairs,
            "pending": [
                {
                    "id": p.id,
                    "name": p.name,
                    "key": p.key,
                    "exclusive": p.exclusive,
                    "status": p.status,
                    "input": p.input,
                }
                for p in self.pending
            ],
            "usage": dict(self.usage),
            "state": self.state,
            "last_text": self.last_text,
            "session": self.session,
            "history_epoch": self.history_epoch,
        }
        if self.tool_loops:  # only agents with detect_tool_loops write it
            data["tool_loops"] = self.tool_loops
        if self.repairing:  # only while a repair turn is due
            data["repairing"] = True
        if self.subagents is not None:  # only agents that declare subagents write it
            data["subagents"] = self.subagents
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> AgentCheckpoint:
        return cls(
            turn=data["turn"],
            phase=data["phase"],
            message_count=data["message_count"],
            model_calls=data["model_calls"],
            tool_calls_total=data["tool_calls_total"],
            repairs=data.get("repairs", 0),
            repairing=bool(data.get("repairing", False)),
            pending=[PendingTool(**item) for item in data.get("pending", ())],
            usage=dict(data.get("usage") or {}),
            state=data.get("state") or {},
            last_text=data.get("last_text", ""),
            session=data.get("session"),
            history_epoch=data.get("history_epoch", 0),
            tool_loops=data.get("tool_loops") or {},
            subagents=data.get("subagents"),
        )

    def copy(self) -> AgentCheckpoint:
        """A copy safe to mutate; ``state`` is replaced wholesale, never mutated in place."""
        return AgentCheckpoint(
            turn=self.turn,
            phase=self.phase,
            message_count=self.message_count,
            model_calls=self.model_calls,
            tool_calls_total=self.tool_calls_total,
            repairs=self.repairs,
            repairing=self.repairing,
            pending=[PendingTool(p.id, p.name, p.key, p.exclusive, p.status, p.input) for p in self.pending],
            usage=dict(self.usage),
            state=self.state,
            last_text=self.last_text,
            session=self.session,
            history_epoch=self.history_epoch,
            tool_loops=self.tool_loops,
            subagents=self.subagents,
        )


def checked_state(state: Mapping[str, Any]) -> dict[str, Any]:
    """``context.state`` (a DataMap) as a checkpoint stores it: a plain JSON copy.

    DataMap checks what is stored in it, but the lists and mappings it holds are
    plain Python containers, so a tool or callback can append anything to one
    (``state["items"].append({"when": datetime.now()})``). Such a value would
    fail the store's encoder inside the step's commit, leaving the run running
    with no terminal event; found here, before the commit, it fails the step
    like any other error, naming where the value is and its type.

    ConfigurationError, because the spec describes it as invalid application
    configuration to correct before retrying: the value comes from application
    code (a tool, a callback), and a retry of the run would run that code again.
    (RunStateError is about a stored run's status, InvocationError about the
    caller's request; neither fits.)
    """
    try:
        return cast(dict[str, Any], to_json_value(state, path="context.state"))
    except (TypeError, ValueError) as exc:
        raise ConfigurationError(
            f"{exc}. The working state is saved with every step, so store a JSON form of the value "
            "(a string, a number, a list or a mapping of them)"
        ) from None


def apply_state_changes(current: dict[str, Any], before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """``current`` with one step's changes to the working state applied.

    A step's changes are what its context's state (``after``) differs from the
    state it started from (``before``): keys it set or changed, keys it deleted.
    ``current`` is the frame's state at commit time; parallel tool calls of one
    turn each start from the same ``before``, so writing ``after`` wholesale
    would drop whatever a sibling committed first (and a commit re-run after a
    version conflict sees that sibling's state here).

    Changes are found and applied per top-level key, comparing values by
    equality: the working state is JSON, and a nested map has no per-entry
    history to merge by, so two parallel tools changing the same top-level key
    (even different entries below it) still leave the later commit's value.
    Returns ``current`` itself when the step changed nothing, and a new dict
    otherwise; none of the arguments is mutated.
    """
    if current is before:  # nobody else committed since the step began
        return after
    changed = {key: value for key, value in after.items() if key not in before or before[key] != value}
    deleted = [key for key in before if key not in after]
    if not changed and not deleted:
        return current
    merged = {key: value for key, value in current.items() if key not in deleted}
    merged.update(changed)
    return merged
