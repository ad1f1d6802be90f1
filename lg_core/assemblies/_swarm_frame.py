"""A Swarm run's frame: its checkpoint data, and what committing a finished member execution writes.

A Swarm run is a run of kind ``swarm`` whose root frame the Swarm drives
(lg_core.engine.driven_frames), one member at a time. Its checkpoint's ``data`` holds:

* ``definition``: the AssemblyDefinition the run started with (``to_dict``), read back by its
  member steps (``run_spec``), so a run resumed after its Swarm changed keeps its own routes;
* ``progress``: the SwarmProgress (active member, member executions, handoffs taken, the
  bounded journey) that the active member's handoff tool checks a call against;
* ``count``: member steps scheduled so far (they number the step keys);
* ``active``: the key of the member step running now;
* ``done``: every finished member execution, in order (status, bounded output, usage, times,
  its predecessor, the handoff it ended with, its child run id): the run's trajectory.

Each member execution is a ``graph_node`` step (the driven frames' step kind) whose key names
the member. Committing one is a transition on the frame's latest state: a handoff records
itself in ``progress`` and schedules the target member with the handoff note as its input;
an answer completes the run with that member's text.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from lg_core.assemblies._step_attempts import attempts_of
from lg_core.assemblies._swarm_rules import SwarmSpec
from lg_core.assemblies.definition import AssemblyDefinition
from lg_core.assemblies.swarm_handoffs import SwarmProgress, next_member_input
from lg_core.assemblies.trajectory import Step, Trajectory
from lg_core.engine.driven_frames import (
    DRIVEN_PHASE,
    DrivenCheckpoint,
    DrivenStart,
    StaleStep,
    StepScope,
    next_checkpoint,
)
from lg_core.engine.graph_nodes import GRAPH_NODE_KIND, node_step_key
from lg_core.engine.recent_dict import DEFAULT_RUN_CACHE_SIZE, RecentDict
from lg_core.messages import Message
from lg_core.result_schema import StructuredResult
from lg_core.run_result import RunResult
from lg_core.store import NewStep, StepCommit
from lg_core.usage import Usage

if TYPE_CHECKING:
    from lg_core.engine.driven_frames import FrameState

FRAME_PATH = "root"


def swarm_start(spec: SwarmSpec, assembly_id: str, message: Message, stored_definition: Any) -> DrivenStart:
    """The first checkpoint and step of a Swarm run: the start member, given the caller's request."""
    progress = SwarmProgress.starting(spec)
    key = node_step_key(FRAME_PATH, 1, progress.active)
    data = {
        "count": 1,
        "active": key,
        "done": [],
        "progress": progress.to_dict(),
        "definition": stored_definition,
    }
    first = NewStep(key, "", GRAPH_NODE_KIND, member_input(progress.active, 1, message.text, None))
    return DrivenStart("swarm", DrivenCheckpoint(phase=DRIVEN_PHASE, data=data), first, assembly_id)


def member_input(member: str, number: int, text: str, predecessor: str | None) -> dict[str, Any]:
    """A member step's input: the member, its execution number, its input text and the execution before it."""
    return {"node": member, "n": number, "input": text, "predecessors": [] if predecessor is None else [predecessor]}


# The definitions of the runs whose member steps this process executes, read once per run.
_RUN_SPECS: RecentDict[str, SwarmSpec] = RecentDict(DEFAULT_RUN_CACHE_SIZE)


def run_spec(run_id: str, stored: Mapping[str, Any] | None, swarm: Any) -> SwarmSpec:
    """The spec run ``run_id`` started with: its stored definition, else the Swarm class's own."""
    cached = _RUN_SPECS.get(run_id, None)
    if cached is not None:
        return cached
    definition = swarm.definition() if stored is None else AssemblyDefinition.from_dict(stored)
    spec = definition.spec
    assert isinstance(spec, SwarmSpec)  # a Swarm run stores a Swarm's definition
    _RUN_SPECS[run_id] = spec
    return spec


class MemberCommit:
    """The commit of one finished member execution on the frame's latest ``state``."""

    def __init__(self, scope: StepScope, spec: SwarmSpec, state: FrameState) -> None:
        self.scope, self.spec, self.state = scope, spec, state
        data = state.checkpoint.data  # type: ignore[attr-defined]  # a swarm frame's DrivenCheckpoint
        if data.get("active") != scope.key:
            raise StaleStep(f"swarm member step {scope.key} is already committed")
        self.data = data
        self.progress = SwarmProgress.from_dict(data["progress"])
        self.usage = Usage.from_dict(state.checkpoint.usage)

    def handed_off(self, record: dict[str, Any], target: str, message: str) -> StepCommit:
        """Record the accepted handoff and schedule ``target`` with the request and the handoff note."""
        source = self.progress.active
        self.progress.record_handoff(self.spec, target, message)  # ToolError when the progress refuses it now
        number = int(self.data["count"]) + 1
        key = node_step_key(FRAME_PATH, number, target)
        text = next_member_input(self.scope.run.invocation.message.text, source, message)
        step = NewStep(key, self.state.id, GRAPH_NODE_KIND, member_input(target, number, text, record["id"]))
        event = self.scope.pair(
            "handoff",
            source=source,
            target=target,
            message=self.progress.journey[-1]["message"] if self.progress.journey else "",
            member_executions=self.progress.steps,
        )
        checkpoint = self._checkpoint(record, number, key)
        return self.scope.commit_for(self.state, checkpoint, [event], step_result={"handoff": target}, new_steps=[step])

    def answered(self, record: dict[str, Any]) -> StepCommit:
        """Complete the run with the active member's answer, the trajectory and the journey."""
        checkpoint = self._checkpoint(record, int(self.data["count"]), None, phase="done")
        checkpoint.last_text = record.get("text") or ""
        result = swarm_result(checkpoint.data["done"], record, self.progress.summary())
        return self.scope.completion(self.state, checkpoint, result, [], [])

    def _checkpoint(
        self, record: dict[str, Any], count: int, active: str | None, phase: str = DRIVEN_PHASE
    ) -> DrivenCheckpoint:
        usage = self.usage + Usage.from_dict(record.get("usage"))
        data = {
            **self.data,
            "count": count,
            "active": active,
            "done": [*self.data["done"], record],
            "progress": self.progress.to_dict(),
        }
        return next_checkpoint(self.state.checkpoint, phase=phase, usage=usage.to_dict(), data=data)


def swarm_result(done: Sequence[Mapping[str, Any]], final: Mapping[str, Any], journey: Mapping[str, Any]) -> RunResult:
    """The run's RunResult: the final member's answer, the total usage, each member execution a Step."""
    usage = Usage()
    for record in done:
        usage = usage + Usage.from_dict(record.get("usage"))
    steps = tuple(_step_of(record) for record in done)
    structured = final.get("structured")
    return RunResult(
        message=Message("assistant", final.get("text") or ""),
        stop_reason="end_turn",
        usage=usage,
        messages=(),
        state={},
        structured_result=None if structured is None else StructuredResult(**structured),
        steps=steps,
        trajectory=Trajectory(steps),
        journey=dict(journey),
    )


def _step_of(record: Mapping[str, Any]) -> Step:
    structured = record.get("structured")
    output = record.get("text") if structured is None else structured["value"]
    if record.get("handoff") is not None:
        output = {"handoff": dict(record["handoff"])}
    return Step(
        id=record["id"],
        participant=record["member"],
        assembly_id=record["agent_id"],
        assembly_kind="agent",
        status=record["status"],
        attempts=attempts_of(record),
        output=output if record["status"] == "completed" else None,
        predecessor_ids=tuple(record.get("predecessors", ())),
    )


__all__ = [
    "FRAME_PATH",
    "MemberCommit",
    "member_input",
    "run_spec",
    "swarm_result",
    "swarm_start",
]
