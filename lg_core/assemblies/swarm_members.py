"""The handoff tool of a Swarm member's run: offered to the model of the member that is active now.

Every Agent's tool registry consults :class:`SwarmHandoffTools`, a tool provider. For a run
that is not a Swarm member's (no parent step, or a parent that is not a Swarm run) it offers
nothing. For a member's run it offers ``handoff``, listing only the routes the member
declares (none: no tool), and checks each call against the Swarm's progress as it stood
when the member started (``SwarmProgress.check_handoff``): a refused call is a ToolError the
model reads, and its run goes on. An accepted call returns ``EndsRun``, which ends the
member's run with the handoff as its result's ``ended_by``; the Swarm's commit records it.

Which Swarm, member and progress a run belongs to is read where its member step left it:
the member step registers it when it builds the child run (this process), and a worker
executing the child's later steps reads it from the store (the parent run's kind, its
frame's stored definition and progress), once per child run.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from lg_core.assemblies._swarm_rules import SwarmSpec
from lg_core.assemblies.definition import AssemblyDefinition
from lg_core.assemblies.swarm_handoffs import (
    HANDOFF_TOOL_NAME,
    SwarmProgress,
    handoff_targets,
    handoff_tool_description,
    handoff_tool_schema,
)
from lg_core.engine.recent_dict import DEFAULT_RUN_CACHE_SIZE, RecentDict
from lg_core.entrypoints import import_entrypoint
from lg_core.errors import RunNotFoundError
from lg_core.tool import Binding, EndsRun, Tool


@dataclass(frozen=True, slots=True)
class MemberSeat:
    """What a member's run needs to offer and check its handoff tool: the Swarm's spec and its progress."""

    spec: SwarmSpec
    progress: SwarmProgress


# By child run id: None for a run that is no Swarm member's (its parent is a Graph node, say).
_SEATS: RecentDict[str, MemberSeat | None] = RecentDict(DEFAULT_RUN_CACHE_SIZE)


def register_seat(child_run_id: str, spec: SwarmSpec, progress: SwarmProgress) -> None:
    """Remember the seat of the child run a member step is starting in this process."""
    _SEATS[child_run_id] = MemberSeat(spec, progress)


def register_no_seat(child_run_id: str) -> None:
    """Remember that the child run a Graph node or a Workflow call starts in this process is no Swarm
    member: its Agent then offers no handoff tool without reading its parent run to find that out."""
    _SEATS[child_run_id] = None


class HandoffTool(Tool):
    """A member's handoff; each member's run gets a subclass with its routes (``handoff_tool_class``)."""

    tool_name = HANDOFF_TOOL_NAME
    description = "Hand this request to another member."
    seat: MemberSeat

    def validate(self, input: Any) -> list[str]:
        # The routes, the message and the bounds are checked in ``call``, as ToolErrors naming what the
        # member may do instead, rather than as a bare schema mismatch.
        return [] if isinstance(input, Mapping) else super().validate(input)

    def call(self, input: Any) -> EndsRun:
        seat = type(self).seat
        target, message = input.get("to"), input.get("message")
        seat.progress.check_handoff(seat.spec, target, message)
        return EndsRun({"to": target, "message": message}, reply=f"Handed off to {target}.")


def handoff_tool_class(seat: MemberSeat) -> type[HandoffTool] | None:
    """The active member's handoff tool, or None when it declares no route (it must answer)."""
    source = seat.progress.active
    schema = handoff_tool_schema(seat.spec, source)
    if schema is None:
        return None
    namespace = {
        "tool_name": HANDOFF_TOOL_NAME,
        "description": handoff_tool_description(seat.spec, source),
        "input_schema": schema,
        "seat": seat,
    }
    return type("MemberHandoffTool", (HandoffTool,), namespace)


class SwarmHandoffTools:
    """The tool provider every Agent's registry consults (lg_core.agent): the handoff tool of a member's run."""

    @classmethod
    def tools(cls, binding: Binding) -> Any:
        run, runtime = binding.run, binding.runtime
        parent = getattr(run, "parent_step", None)
        if run is None or parent is None or runtime is None:
            return None
        seat = _seat_of(runtime, run.id, parent)
        if seat is None or not handoff_targets(seat.spec, seat.progress.active):
            return None
        return handoff_tool_class(seat)


def _seat_of(runtime: Any, run_id: str, parent: tuple[str, str]) -> MemberSeat | None:
    if run_id in _SEATS:
        return _SEATS.get(run_id, None)
    seat = _stored_seat(runtime.store, *parent)
    _SEATS[run_id] = seat
    return seat


def _stored_seat(store: Any, parent_run_id: str, step_key: str) -> MemberSeat | None:
    """The seat the Swarm run ``parent_run_id`` gave its member step ``step_key``; None for another parent."""
    try:
        record = store.load_run(parent_run_id)
    except RunNotFoundError:
        return None
    if record.kind != "swarm":
        return None
    data = store.load_frame(f"{parent_run_id}/root").checkpoint.get("data") or {}
    if data.get("active") != step_key:
        return None  # that member step is committed: its run offers no handoff any more
    stored = data.get("definition")
    swarm: Any = None if stored is not None else import_entrypoint(record.entrypoint)
    spec = (swarm.definition() if stored is None else AssemblyDefinition.from_dict(stored)).spec
    assert isinstance(spec, SwarmSpec)  # a Swarm run stores a Swarm's definition
    return MemberSeat(spec, SwarmProgress.from_dict(data["progress"]))


__all__ = ["HandoffTool", "MemberSeat", "SwarmHandoffTools", "handoff_tool_class", "register_no_seat", "register_seat"]
