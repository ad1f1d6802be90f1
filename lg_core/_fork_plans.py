"""Forks of a run: which steps one can start from, and the new run's rows copied from the original.

:func:`lg_core.replay.fork` plans a fork with :func:`plan_fork` and writes it in one
transaction with :func:`write_fork`.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from lg_core.engine.codec import encode_event_data
from lg_core.engine.step_kinds import STEP_KINDS
from lg_core.errors import InvocationError
from lg_core.events import StreamEvent
from lg_core.invocation import Invocation
from lg_core.messages import Message
from lg_core.runtime import Runtime
from lg_core.store import NewStep, RunRecord, StepRecord

_FORKABLE_KINDS = STEP_KINDS  # the kinds of step a fork can start from (lg_core.engine.step_kinds)
COMMITTED_STATUSES = ("succeeded", "unknown")  # a finished step's statuses (its checkpoint was committed)
KEEP: Any = object()  # the fork keeps the original's deadline
_LISTED_KEYS = 20


@dataclass(frozen=True, slots=True)
class ForkPlan:
    """The step forked from, the commit that scheduled it, and the rows the new run starts with."""

    step: StepRecord
    scheduler: StepRecord
    open_steps: tuple[StepRecord, ...]
    history: tuple[StepRecord, ...]


def write_fork(
    rt: Runtime,
    record: RunRecord,
    plan: ForkPlan,
    invocation: Invocation,
    *,
    holder: str | None,
    changes: dict[str, Any],
) -> StreamEvent:
    """The fork's one transaction (see :meth:`RunStore.copy_run`); returns its run_forked event."""
    new_id = invocation.run_id
    data = {
        "run_id": new_id,
        "parent_run_id": record.id,
        "from_step": plan.step.key,
        "restored_from": plan.scheduler.key,
        "scheduled": [s.key for s in plan.open_steps],
        **changes,
    }
    events = _copied_events(rt, record, new_id, plan.scheduler.event_seq or 0)
    events.append(("run_forked", encode_event_data(data)))
    history = [
        replace(
            s, run_id=new_id, frame_id=rekey(s.frame_id, record.id, new_id), checkpoint=_fork_checkpoint(s.checkpoint)
        )
        for s in plan.history
    ]
    rt.store.copy_run(
        _fork_row(record, invocation, holder),
        _fork_frame(rt, record, new_id, plan.scheduler),
        _copied_messages(rt, record, plan.scheduler),
        events,
        history,
        [NewStep(s.key, rekey(s.frame_id, record.id, new_id), s.kind, s.input) for s in plan.open_steps],
        plan.scheduler.key,
    )
    return StreamEvent.build("run_forked", **data).with_seq(len(events))


def forkable_steps(record: RunRecord, steps: Sequence[StepRecord]) -> list[StepRecord]:
    """Steps a fork can start from: model or tool steps of the root frame whose scheduler committed."""
    by_key = {s.key: s for s in steps}
    root = f"{record.id}/root"
    result = []
    for step in steps:
        scheduler = by_key.get(step.scheduled_by or "")
        if step.kind in _FORKABLE_KINDS and step.frame_id == root and scheduler is not None and _committed(scheduler):
            result.append(step)
    return result


def _committed(step: StepRecord) -> bool:
    return step.status in COMMITTED_STATUSES and step.checkpoint is not None and step.event_seq is not None


def plan_fork(record: RunRecord, steps: Sequence[StepRecord], from_step: str) -> ForkPlan:
    valid = forkable_steps(record, steps)
    step = next((s for s in valid if s.key == from_step), None)
    if step is None:
        raise InvocationError(_unknown_step_message(record, from_step, valid, any(s.key == from_step for s in steps)))
    scheduler = next(s for s in steps if s.key == step.scheduled_by)
    upto = scheduler.event_seq or 0
    siblings = tuple(s for s in steps if s.scheduled_by == scheduler.key and s.kind in _FORKABLE_KINDS)
    history = tuple(
        s
        for s in steps
        if (_committed(s) and (s.event_seq or 0) <= upto)
        or (s.kind == "once" and s.status in COMMITTED_STATUSES and s.created_at <= (scheduler.finished_at or 0))
    )
    return ForkPlan(step, scheduler, siblings, history)


def _unknown_step_message(record: RunRecord, key: str, valid: Sequence[StepRecord], exists: bool) -> str:
    keys = [s.key for s in valid]
    listed = ", ".join(keys[:_LISTED_KEYS]) + (
        f" (and {len(keys) - _LISTED_KEYS} more)" if len(keys) > _LISTED_KEYS else ""
    )
    reason = (
        "cannot be forked from (only model and tool steps whose scheduling committed)" if exists else "does not exist"
    )
    return f"step {key!r} of run {record.id} {reason}; steps to fork from: {listed or 'none'}"


def fork_invocation(record: RunRecord, run_id: str | None, model: Any, settings: Any, deadline: Any) -> Invocation:
    data = dict(record.invocation)
    if settings is not None and not isinstance(settings, Mapping):
        raise InvocationError(f"settings must be a mapping like {{'temperature': 0.2}}, got {type(settings).__name__}")
    merged = {**(data.get("settings") or {}), **dict(settings or {})}
    data["settings"] = {k: v for k, v in merged.items() if v is not None}
    data["run_id"] = run_id
    data.pop("invocation_id", None)
    data.pop("session_id", None)  # a new session (the fork's id): the original's is never changed by a fork
    if model is not None:
        data["model_override"] = model
    if deadline is not KEEP:
        data.pop("deadline_at", None)
        data["deadline"] = deadline
    invocation = Invocation.restore(data)
    passed = invocation.deadline_at
    if passed is not None and passed.timestamp() <= time.time():
        raise InvocationError(
            f"the fork's deadline ({passed.isoformat(timespec='seconds')}, kept from run {record.id}) has passed; "
            "pass deadline=SECONDS (CLI: --deadline SECONDS), or deadline=None to run without one"
        )
    return invocation


def _fork_row(record: RunRecord, invocation: Invocation, holder: str | None) -> dict[str, Any]:
    deadline = invocation.deadline_at
    return {
        "id": invocation.run_id,
        "entrypoint": record.entrypoint,
        "kind": record.kind,
        "status": "running",
        "invocation": invocation.to_dict(),
        "session_id": invocation.session_id,
        "actor_id": record.actor_id,  # the source run's persistence actor (Configuration.session_actor)
        "holder": holder,
        "deadline_at": None if deadline is None else deadline.timestamp(),
        "parent_run_id": record.id,
        "execution_state": record.execution_state,  # the original request's, like its actor
    }


def _fork_frame(rt: Runtime, record: RunRecord, new_id: str, scheduler: StepRecord) -> dict[str, Any]:
    frame = rt.store.load_frame(scheduler.frame_id)
    return {
        "id": rekey(frame.id, record.id, new_id),
        "run_id": new_id,
        "path": frame.path,
        "kind": frame.kind,
        "entrypoint": frame.entrypoint,
        "version": 0,
        "checkpoint": _fork_checkpoint(scheduler.checkpoint),
    }


def _fork_checkpoint(checkpoint: dict[str, Any] | None) -> dict[str, Any] | None:
    """A copied checkpoint for the fork's new session, whose first write holds the whole conversation."""
    if not checkpoint or not checkpoint.get("session"):
        return checkpoint
    return {**checkpoint, "session": {"count": 0, "skip": 0}}


def _copied_messages(rt: Runtime, record: RunRecord, scheduler: StepRecord) -> list[tuple[int, Message]]:
    count = int((scheduler.checkpoint or {}).get("message_count", 0))
    stored = rt.store.load_messages(scheduler.frame_id)[:count]
    return [(seq, Message.from_dict(data)) for seq, data in enumerate(stored)]


def _copied_events(rt: Runtime, record: RunRecord, new_id: str, upto: int) -> list[tuple[str, dict[str, Any]]]:
    """Durable events 1..upto, numbered 1..N again, naming the new run where they named the original.

    Except a ``run_forked`` event (the original is itself a fork): it records how the
    original was made, so it keeps naming the original, before the new run's own.
    """
    copied = []
    for event in rt.store.load_events(record.id):
        if event.seq > upto:
            break
        data = dict(event.data)
        if data.get("run_id") == record.id and event.type != "run_forked":
            data["run_id"] = new_id
        copied.append((event.type, data))
    return copied


def rekey(frame_id: str, old: str, new: str) -> str:
    return new + frame_id[len(old) :] if frame_id.startswith(old + "/") else frame_id


__all__ = [
    "COMMITTED_STATUSES",
    "KEEP",
    "ForkPlan",
    "forkable_steps",
    "fork_invocation",
    "plan_fork",
    "rekey",
    "write_fork",
]
