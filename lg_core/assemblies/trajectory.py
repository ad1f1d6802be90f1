"""What a composite assembly did: its Steps, their Attempts, and Trajectory queries over them.

A Step is one logical child execution (a Workflow call, a Swarm member's turn, a Graph
node); each try of it is an Attempt with its times, usage, status and a sanitized error
description. Results are stored with the run and shown to callers, so a step keeps a
*bounded* semantic output: longer than :data:`MAX_STEP_OUTPUT_CHARS` (as text, or as JSON for
a structured value) it is cut, and ``output_truncated`` says so. Use instrumentation for
deeper diagnostics.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from lg_core.run_result import RunResult
from lg_core.usage import Usage

MAX_STEP_OUTPUT_CHARS = 4096
MAX_ERROR_CHARS = 500
STATUSES = ("completed", "failed", "partial", "cancelled", "timed_out")
_CUT = "... [cut]"


@dataclass(frozen=True, slots=True)
class Attempt:
    """One bounded try of a step: its 1-based number, times, status, usage and sanitized error."""

    number: int
    started_at: datetime
    finished_at: datetime
    status: str
    usage: Usage = Usage()
    error: str | None = None

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"attempt status {self.status!r} is not one of {STATUSES}")
        if self.error is not None and len(self.error) > MAX_ERROR_CHARS:
            object.__setattr__(self, "error", self.error[: MAX_ERROR_CHARS - len(_CUT)] + _CUT)

    def to_dict(self) -> dict[str, Any]:
        return {
            "number": self.number,
            "started_at": self.started_at.isoformat(),
            "finished_at": self.finished_at.isoformat(),
            "status": self.status,
            "usage": self.usage.to_dict(),
            "error": self.error,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Attempt:
        return cls(
            number=data["number"],
            started_at=datetime.fromisoformat(data["started_at"]),
            finished_at=datetime.fromisoformat(data["finished_at"]),
            status=data["status"],
            usage=Usage.from_dict(data.get("usage")),
            error=data.get("error"),
        )


def describe_error(error: BaseException) -> str:
    """The sanitized, bounded description an Attempt keeps: the class name and message, no traceback."""
    return f"{type(error).__name__}: {error}"


@dataclass(frozen=True, slots=True)
class Step:
    """One logical child execution in a composite result (see the module docstring)."""

    id: str
    participant: str
    assembly_id: str
    assembly_kind: str
    status: str
    attempts: tuple[Attempt, ...] = ()
    output: Any = None
    output_truncated: bool = False
    predecessor_ids: tuple[str, ...] = ()
    parent_id: str | None = None
    branch_id: str | None = None

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"step status {self.status!r} is not one of {STATUSES}")
        output, cut = bounded_output(self.output)
        object.__setattr__(self, "output", output)
        object.__setattr__(self, "output_truncated", self.output_truncated or cut)
        object.__setattr__(self, "attempts", tuple(self.attempts))
        object.__setattr__(self, "predecessor_ids", tuple(self.predecessor_ids))

    @property
    def usage(self) -> Usage:
        """Usage accumulated across the step's attempts."""
        total = Usage()
        for attempt in self.attempts:
            total = total + attempt.usage
        return total

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "participant": self.participant,
            "assembly_id": self.assembly_id,
            "assembly_kind": self.assembly_kind,
            "status": self.status,
            "attempts": [attempt.to_dict() for attempt in self.attempts],
            "output": self.output,
            "output_truncated": self.output_truncated,
            "predecessor_ids": list(self.predecessor_ids),
            "parent_id": self.parent_id,
            "branch_id": self.branch_id,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Step:
        return cls(
            **{**data, "attempts": tuple(Attempt.from_dict(item) for item in data.get("attempts", ()))},
        )


def bounded_output(output: Any) -> tuple[Any, bool]:
    """``output`` if its text (or JSON) form fits :data:`MAX_STEP_OUTPUT_CHARS`; else that form cut, and True."""
    if output is None:
        return None, False
    text = output if isinstance(output, str) else _as_json(output)
    if len(text) <= MAX_STEP_OUTPUT_CHARS:
        return output, False
    return text[: MAX_STEP_OUTPUT_CHARS - len(_CUT)] + _CUT, True


def _as_json(output: Any) -> str:
    try:
        return json.dumps(output, ensure_ascii=False, default=str)
    except (TypeError, ValueError):  # a circular value: its repr still says what it was
        return repr(output)


class Trajectory:
    """Immutable queries over the steps of one assembly invocation, in execution order."""

    __slots__ = ("_by_id", "_steps")

    def __init__(self, steps: Sequence[Step]) -> None:
        self._steps = tuple(steps)
        self._by_id = {step.id: step for step in self._steps}
        if len(self._by_id) != len(self._steps):
            raise ValueError("a trajectory's steps must have distinct ids")

    @property
    def steps(self) -> tuple[Step, ...]:
        return self._steps

    def __iter__(self) -> Iterator[Step]:
        return iter(self._steps)

    def __len__(self) -> int:
        return len(self._steps)

    def __repr__(self) -> str:
        return f"Trajectory({[step.participant for step in self._steps]!r})"

    def step(self, id: str) -> Step:
        """The step with stable id ``id``; KeyError naming it otherwise."""
        try:
            return self._by_id[id]
        except KeyError:
            raise KeyError(f"no step {id!r} in this trajectory") from None

    def find(self, participant: str) -> Step | None:
        """The first step of ``participant`` (a node, member or ``as_`` name), or None."""
        return next((step for step in self._steps if step.participant == participant), None)

    def for_participant(self, participant: str) -> tuple[Step, ...]:
        """Every step of ``participant``, in execution order (a node or member may run more than once)."""
        return tuple(step for step in self._steps if step.participant == participant)

    def children(self, id: str) -> tuple[Step, ...]:
        """The steps whose parent is step ``id``."""
        return tuple(step for step in self._steps if step.parent_id == id)

    def attempts_for(self, id: str) -> tuple[Attempt, ...]:
        return self.step(id).attempts

    def transitions(self) -> list[tuple[str, str]]:
        """Every declared (predecessor id, step id) pair, in execution order."""
        return [(before, step.id) for step in self._steps for before in step.predecessor_ids]

    def concurrent(self, first: str | Step, second: str | Step) -> bool:
        """Whether any attempts of the two steps overlapped in time (ids or Steps)."""
        one = self.step(first.id if isinstance(first, Step) else first)
        other = self.step(second.id if isinstance(second, Step) else second)
        return any(
            a.started_at < b.finished_at and b.started_at < a.finished_at for a in one.attempts for b in other.attempts
        )

    def to_list(self) -> list[dict[str, Any]]:
        return [step.to_dict() for step in self._steps]

    @classmethod
    def from_list(cls, data: Sequence[Mapping[str, Any]]) -> Trajectory:
        return cls([Step.from_dict(item) for item in data])


def stored_assembly_result(stored: Mapping[str, Any]) -> RunResult:
    """A Workflow's, Swarm's or Graph's RunResult read back from its run row (another process ran it):
    the answer, usage and structured result, every step with its Trajectory, and a Swarm's journey."""
    base = RunResult.from_dict(stored, ())
    steps = tuple(Step.from_dict(item) for item in stored.get("steps", ()))
    return RunResult(
        message=base.message,
        stop_reason=base.stop_reason,
        usage=base.usage,
        messages=(),
        state=base.state,
        structured_result=base.structured_result,
        steps=steps,
        trajectory=Trajectory(steps),
        journey=base.journey,
    )


__all__ = [
    "Attempt",
    "MAX_STEP_OUTPUT_CHARS",
    "STATUSES",
    "Step",
    "Trajectory",
    "bounded_output",
    "describe_error",
    "stored_assembly_result",
]
