"""Contextual ``agent_stream`` events: which Agent, inside which assembly steps, produced an event.

A composite assembly's caller sees its participants' work as ``agent_stream``
events: ``data["source"]`` is an :class:`AgentStreamSource` naming the Agent and
the assembly steps that enclose it (outermost first), ``data["event"]`` the
Agent's own event, copied and frozen so an observer changing it cannot reach the
running assembly, and, on the Agent's ``invocation_start``, ``data["input"]`` the
input its step routed to it (frozen too). The wrappers are a live projection of
the participants' own events, which each child run keeps in its own log; they are
never stored in the assembly run's log (docs/architecture.md, "Agent streams").
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from types import MappingProxyType
from typing import Any

from lg_core.engine.codec import decode_event_data, encode_event_data, encode_value
from lg_core.events import StreamEvent

# A participant's run-level events (its ending, its replay bookkeeping) are not an Agent's
# activity: the assembly reports its own ending, so wrapping them would announce ends twice.
# The ``assembly_kind`` of the step that runs a managed subagent's turn: a delegation, not an assembly
# step, so it names the wrapped Agent's ``agent_path`` (``/root/<task name>``, the step's id) instead
# of joining the ``assembly_path``, which lists only Workflow, Swarm and Graph steps.
DELEGATION = "subagent"

RUN_LEVEL_EVENTS: frozenset[str] = frozenset(
    {"run_stop", "run_error", "run_partial", "run_cancel", "run_resumed", "run_retried", "run_forked"}
)


@dataclass(frozen=True, slots=True)
class AgentStreamStep:
    """One assembly step on the way to a streamed Agent: the assembly, its kind, the participant
    (node, member or call name), the step's id and, in a Graph, the branch it ran on."""

    assembly_id: str
    assembly_kind: str
    participant: str
    step_id: str
    branch_id: str | None = None


@dataclass(frozen=True, slots=True)
class AgentStreamSource:
    """Which Agent invocation produced a wrapped event: ``assembly_path`` is empty for a top-level
    Agent and lists the enclosing assembly steps from the outermost inward otherwise."""

    agent_id: str
    operation_id: str
    agent_path: str = "/root"
    parent_operation_id: str | None = None
    assembly_path: tuple[AgentStreamStep, ...] = ()

    def within(self, step: AgentStreamStep) -> AgentStreamSource:
        """This source seen one assembly further out: ``step`` encloses the path it had."""
        return replace(self, assembly_path=(step, *self.assembly_path))


def frozen_copy(value: Any) -> Any:
    """A deep, read-only copy: mappings become mapping proxies, lists and tuples tuples."""
    if isinstance(value, Mapping):
        return MappingProxyType({key: frozen_copy(item) for key, item in value.items()})
    if isinstance(value, list | tuple):
        return tuple(frozen_copy(item) for item in value)
    if isinstance(value, set | frozenset):
        return frozenset(frozen_copy(item) for item in value)
    return value


def wrapped(event: StreamEvent, source: AgentStreamSource, routed_input: Any = None) -> StreamEvent:
    """The ``agent_stream`` event carrying ``event`` (copied, frozen) from ``source``; the routed
    input rides on the Agent's ``invocation_start`` only."""
    # The stored form rides along: another process, or JSON, gets the caller-safe form the log holds.
    inner = StreamEvent(event.type, frozen_copy(event.data), event.seq, None, event.stored)
    data: dict[str, Any] = {"source": source, "event": inner}
    if event.type == "invocation_start":
        data["input"] = frozen_copy(routed_input)
    return StreamEvent.build("agent_stream", **data)


def rewrapped(wrapper: StreamEvent, step: AgentStreamStep) -> StreamEvent:
    """A nested assembly's wrapper as its enclosing assembly's caller sees it: ``step`` prefixed to its path."""
    data = dict(wrapper.data)
    data["source"] = data["source"].within(step)
    return StreamEvent.build("agent_stream", **data)


def delegated_wrapper(wrapper: StreamEvent, step: AgentStreamStep) -> StreamEvent:
    """A subagent's child's wrapper as the subagent's parent sees it: a delegation is no assembly
    step, so the path is kept, and the innermost delegation names the Agent's place (an Agent no
    delegation named yet, one a composite step inside the subagent ran, sits at the subagent's)."""
    source: AgentStreamSource = wrapper.data["source"]
    if source.agent_path != "/root":
        return wrapper
    data = dict(wrapper.data)
    data["source"] = replace(source, agent_path=step.step_id)
    return StreamEvent.build("agent_stream", **data)


@dataclass(frozen=True, slots=True)
class AgentStreamLink:
    """How a child's events reach its parent: the step enclosing the child and what it runs.

    ``agent_id`` is set when the child runs an Agent (its events are wrapped); for a child
    that runs an assembly it is None, and only the wrappers that assembly made are passed on.
    ``step`` is None for a child no composite step encloses (an Agent's tool call runs it):
    its sources' ``assembly_path`` lists only the composite steps around it."""

    parent_run_id: str
    step: AgentStreamStep | None
    agent_id: str | None
    routed_input: Any = None

    def forwarded(self, child_run_id: str, event: StreamEvent) -> StreamEvent | None:
        """The parent's wrapper for the child's ``event``, or None when it is not an Agent's activity."""
        delegated = self.step is not None and self.step.assembly_kind == DELEGATION
        if event.type == "agent_stream":
            if self.step is None:
                return event
            return delegated_wrapper(event, self.step) if delegated else rewrapped(event, self.step)
        if self.agent_id is None or event.type in RUN_LEVEL_EVENTS:
            return None
        source = AgentStreamSource(
            agent_id=self.agent_id,
            operation_id=child_run_id,
            agent_path=self.step.step_id if delegated and self.step is not None else "/root",
            parent_operation_id=self.parent_run_id,
            assembly_path=() if self.step is None or delegated else (self.step,),
        )
        return wrapped(event, source, self.routed_input)


def standalone_wrapper(run: Any, event: StreamEvent) -> StreamEvent | None:
    """A standalone Agent's run asked for ``include_agent_events=True``: its own ``event`` wrapped,
    with an empty assembly path (an assembly's wrappers come from its children's links)."""
    if event.type == "agent_stream" or event.type in RUN_LEVEL_EVENTS or run.agent_class is None:
        return None
    if not run.include_agent_events:
        return None
    source = AgentStreamSource(agent_id=str(getattr(run.entrypoint_class, "agent_id", "")), operation_id=run.id)
    return wrapped(event, source, run.invocation.message)


def encoded_wrapper(event: StreamEvent) -> dict[str, Any]:
    """A wrapper's data as JSON, for another process's stream (decoded_wrapper reads it back)."""
    source: AgentStreamSource = event.data["source"]
    inner: StreamEvent = event.data["event"]
    encoded: dict[str, Any] = {
        "source": _source_json(source),
        "event": {"type": inner.type, "data": _inner_json(inner), "seq": inner.seq},
    }
    if "input" in event.data:
        encoded["input"] = encode_value(event.data["input"])
    return encoded


def _source_json(source: AgentStreamSource) -> dict[str, Any]:
    """``dataclasses.asdict(source)``, written out: asdict deep-copies every field through a
    generic walk, a cost paid for each event of every child run on the workers."""
    return {
        "agent_id": source.agent_id,
        "operation_id": source.operation_id,
        "agent_path": source.agent_path,
        "parent_operation_id": source.parent_operation_id,
        "assembly_path": tuple(
            {
                "assembly_id": step.assembly_id,
                "assembly_kind": step.assembly_kind,
                "participant": step.participant,
                "step_id": step.step_id,
                "branch_id": step.branch_id,
            }
            for step in source.assembly_path
        ),
    }


def _inner_json(inner: StreamEvent) -> dict[str, Any]:
    return dict(inner.stored) if inner.stored is not None else encode_event_data(inner.data)


def decoded_wrapper(data: Mapping[str, Any]) -> dict[str, Any]:
    """A wrapper's data read from JSON: the source and the inner event rebuilt, frozen again."""
    raw = dict(data["source"])
    raw["assembly_path"] = tuple(AgentStreamStep(**step) for step in raw.get("assembly_path") or ())
    inner = data["event"]
    event = StreamEvent(inner["type"], frozen_copy(decode_event_data(inner["data"])), inner.get("seq"))
    decoded: dict[str, Any] = {"source": AgentStreamSource(**raw), "event": event}
    if "input" in data:
        decoded["input"] = frozen_copy(data["input"])
    return decoded


def chain_wrappers(run: Any, event: StreamEvent) -> list[tuple[str, StreamEvent]]:
    """For a child run on the workers, ``event`` wrapped for each enclosing assembly run that wants it.

    The child's invocation carries its ``agent_stream_chain`` (start_or_find_child): the enclosing
    runs innermost first, each with the step that runs the next one in. Publishing to every
    ancestor directly spares the parked parents (on no process) from passing the wrappers on."""
    chain = run.invocation.get("agent_stream_chain")
    if not chain or run.agent_class is None or event.type == "agent_stream" or event.type in RUN_LEVEL_EVENTS:
        return []
    path: tuple[AgentStreamStep, ...] = ()
    agent_path = ""
    published = []
    base = AgentStreamSource(
        agent_id=str(getattr(run.entrypoint_class, "agent_id", "")),
        operation_id=run.id,
        parent_operation_id=chain[0]["run_id"],
    )
    for ancestor in chain:
        if ancestor["step"] is not None:  # None: an Agent's tool call, which no composite step names
            step = AgentStreamStep(**ancestor["step"])
            if step.assembly_kind != DELEGATION:
                path = (step, *path)
            elif not agent_path:  # the innermost delegation names the Agent's place
                agent_path = step.step_id
        source = replace(base, assembly_path=path, agent_path=agent_path or "/root")
        wrapper = wrapped(event, source, run.invocation.message)
        published.append((ancestor["run_id"], wrapper.with_stored(encoded_wrapper(wrapper))))
    return published


def chain_for(parent: Any, step: AgentStreamStep | None) -> list[dict[str, Any]]:
    """The ``agent_stream_chain`` of a child ``parent`` starts on the workers at ``step`` (None: an
    Agent's tool call)."""
    link = {"run_id": parent.id, "step": None if step is None else asdict(step)}
    return [link, *(parent.invocation.get("agent_stream_chain") or ())]


def describe(event: StreamEvent) -> str:
    """One line for a wrapper: the path of participants, the Agent and the inner event's type."""
    source: AgentStreamSource = event.data["source"]
    path = "/".join(step.participant for step in source.assembly_path) or source.agent_id
    return f"[{path}] {source.agent_id} {event.data['event'].type}"


__all__ = [
    "DELEGATION",
    "RUN_LEVEL_EVENTS",
    "AgentStreamLink",
    "AgentStreamSource",
    "AgentStreamStep",
    "chain_for",
    "chain_wrappers",
    "decoded_wrapper",
    "encoded_wrapper",
    "describe",
    "frozen_copy",
    "rewrapped",
    "standalone_wrapper",
    "wrapped",
]
