"""A Graph run's frame: its checkpoint data, and what committing a finished node writes.

A Graph run is a run of kind ``graph`` whose root frame the Graph drives
(lg_core.engine.driven_frames). Its checkpoint's ``data`` holds:

* ``definition``: the AssemblyDefinition the run started with (``to_dict``), which its node steps
  read back (``run_spec``), so a run resumed after its Graph changed keeps its own routes; None
  when the definition names code no other process could import (a lambda). Only the first
  checkpoint holds it, which the run's start step keeps for good; every later one says
  ``"start"`` (DEFINITION_AT_START) instead, so a node's commit does not write the whole
  definition again, twice (frame and step row), at every node;
* ``assembly_id``: the definition's id, which names the Graph in ``agent_stream`` sources;
* ``count``: node executions scheduled so far (``max_steps`` bounds it, and it numbers step keys);
* ``active``: the keys of the node steps scheduled and not yet committed;
* ``done``: every committed node execution, in commit order (status, bounded output, usage,
  times, predecessors, branch, child run id): the run's trajectory and the nodes' results;
* ``groups``: the parallel groups started and not yet joined, by join node: the branches that
  arrived, how many run, and the branch heads queued behind ``max_concurrency``.

Committing a node is a transition (``after_node``): a pure function of the frame's latest
state and the node's outcome. Parallel branches commit to the same frame, so a lost version
race re-runs it on the fresh state, and exactly one commit, the last branch's, sees every
branch arrived and schedules the join.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from lg_core.assemblies._graph_rules import GraphSpec
from lg_core.assemblies._parallel_groups import ParallelGroup
from lg_core.assemblies._step_attempts import attempts_of
from lg_core.assemblies.declarations import StateCallback
from lg_core.assemblies.definition import AssemblyDefinition
from lg_core.assemblies.graph_routing import route_after
from lg_core.assemblies.graph_state import GraphState
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
from lg_core.errors import AssemblyLimitError, RunStateError
from lg_core.messages import Message
from lg_core.result_schema import StructuredResult
from lg_core.run_result import RunResult
from lg_core.store import START_STEP, NewStep, RunStore, StepCommit
from lg_core.usage import Usage

if TYPE_CHECKING:
    from lg_core.engine.driven_frames import FrameState

FRAME_PATH = "root"
DEFINITION_AT_START = "start"  # a checkpoint's ``definition`` when the run's first checkpoint holds it
_UNREAD_STATE = GraphState(input=None)  # what routing gets when no condition leaves the node to read a state


def graph_start(spec: GraphSpec, assembly_id: str, message: Message, stored_definition: Any) -> DrivenStart:
    """The first checkpoint and step of a Graph run: the start node, given the caller's input."""
    assert spec.start is not None  # a validated Graph has a start node
    key = node_step_key(FRAME_PATH, 1, spec.start)
    data = {
        "count": 1,
        "active": [key],
        "done": [],
        "groups": {},
        "definition": stored_definition,
        "assembly_id": assembly_id,
    }
    first = NewStep(key, "", GRAPH_NODE_KIND, _node_input(spec.start, 1, message.text, (), None))
    return DrivenStart("graph", DrivenCheckpoint(phase=DRIVEN_PHASE, data=data), first, assembly_id)


# The definitions of the runs whose nodes this process executes, read once per run (decoding one
# imports and checks its code again): a run's definition never changes while it runs.
_RUN_SPECS: RecentDict[str, GraphSpec] = RecentDict(DEFAULT_RUN_CACHE_SIZE)


def run_spec(run_id: str, stored: Mapping[str, Any] | str | None, graph: Any, store: RunStore) -> GraphSpec:
    """The spec run ``run_id`` started with: its stored definition (read from the run's start step when
    ``stored`` says so), or, when none could be stored (a lambda condition or mapper has no import
    path), the Graph class's own."""
    cached = _RUN_SPECS.get(run_id, None)
    if cached is not None:
        return cached
    found = _first_definition(run_id, store) if stored == DEFINITION_AT_START else stored
    definition = graph.definition() if not isinstance(found, Mapping) else AssemblyDefinition.from_dict(found)
    spec = definition.spec
    assert isinstance(spec, GraphSpec)  # a Graph run stores a Graph's definition
    _RUN_SPECS[run_id] = spec
    return spec


def _first_definition(run_id: str, store: RunStore) -> Mapping[str, Any]:
    """The definition in run ``run_id``'s first checkpoint, which its start step keeps."""
    start = store.load_step(run_id, START_STEP)
    definition = None if start is None else (start.checkpoint or {}).get("data", {}).get("definition")
    if not isinstance(definition, Mapping):
        raise RunStateError(f"graph run {run_id} has lost the definition it started with (its {START_STEP} step)")
    return definition


def _carried(definition: Any) -> Any:
    """What a later checkpoint says of the definition: where it is, not the definition again."""
    return DEFINITION_AT_START if isinstance(definition, Mapping) else definition


def _node_input(node: str, number: int, text: str, predecessors: Sequence[str], branch: str | None) -> dict[str, Any]:
    return {"node": node, "n": number, "input": text, "predecessors": list(predecessors), "branch": branch}


def node_result(record: Mapping[str, Any]) -> RunResult:
    """A committed node's RunResult, as conditions and mappers read it (``state.result(name)``)."""
    structured = record.get("structured")
    return RunResult(
        message=Message("assistant", record.get("text") or ""),
        stop_reason=None,
        usage=Usage.from_dict(record.get("usage")),
        messages=(),
        state={},
        structured_result=None if structured is None else StructuredResult(**structured),
    )


def _output_of(record: Mapping[str, Any]) -> Any:
    structured = record.get("structured")
    return record.get("text") if structured is None else structured["value"]


class NodeCommit:
    """The commit of one finished node on the frame's latest ``state`` (one transition's worth)."""

    def __init__(self, scope: StepScope, spec: GraphSpec, state: FrameState, message: Message) -> None:
        self.scope, self.spec, self.state, self.message = scope, spec, state, message
        data = state.checkpoint.data  # type: ignore[attr-defined]  # a graph frame's DrivenCheckpoint
        if scope.key not in data["active"]:
            raise StaleStep(f"graph node {scope.key} is already committed")
        self.count: int = data["count"]
        self.active: list[str] = [key for key in data["active"] if key != scope.key]
        self.done: list[dict[str, Any]] = list(data["done"])
        self.groups: dict[str, dict[str, Any]] = {
            join: {**group, "arrived": list(group["arrived"]), "queued": list(group["queued"])}
            for join, group in data["groups"].items()
        }
        self.definition = data.get("definition")
        self.assembly_id = data.get("assembly_id")
        self.new_steps: list[NewStep] = []
        self.usage = Usage.from_dict(state.checkpoint.usage)  # the run's so far; each committed node adds its own

    # -- results as conditions and mappers see them ------------------------------------------

    def latest(self) -> dict[str, dict[str, Any]]:
        """The latest committed, completed execution of each node, by node name."""
        return {record["node"]: record for record in self.done if record["status"] == "completed"}

    def graph_state(self, current: str, incoming: Sequence[str], error: BaseException | None = None) -> GraphState:
        latest = self.latest()
        invocation = self.scope.run.invocation
        return GraphState(
            input=self.message,
            results={name: node_result(record) for name, record in latest.items()},
            incoming_results={name: node_result(latest[name]) for name in incoming if name in latest},
            current=current,
            step=self.count,
            history=tuple(invocation.history),
            context=dict(invocation.context),
            error=error,
        )

    # -- the commit ---------------------------------------------------------------------------

    def completed(self, record: dict[str, Any]) -> StepCommit:
        """The commit of a node that completed: its result, and the route its completion takes."""
        self._add(record)
        node = record["node"]
        routes = self.spec.routes_from(node)
        # Conditions read a copied, frozen state; without one the route reads no state (copying costs).
        conditional = any(edge.when is not None for edge in routes)
        state = self.graph_state(node, (node,)) if conditional else _UNREAD_STATE
        route = route_after(self.spec, node, state)
        if route.finish:
            return self._finish(record)
        group = _group_with_branch_node(self.spec, node)
        for edge in route.edges:
            for target in edge.targets:
                if group is not None and target == group.join:
                    self._arrive(group, record)
                    continue
                started = _group_started_by(self.spec, node, target)
                if started is not None:
                    self._start_group(started, record)
                    continue
                self._schedule(target, edge.input, (node,), (record["id"],), None)
        return self._commit()

    def recovered(
        self, record: dict[str, Any], target: str, mapper: StateCallback | None, error: BaseException
    ) -> StepCommit:
        """The commit of a node that failed with an error an ``error_edge`` routes to ``target``."""
        self._add(record)
        state = self.graph_state(target, (), error)
        text = _mapped(mapper, state) if mapper is not None else _recovery_input(self.message.text, record)
        self._schedule_text(target, text, (record["id"],), record.get("branch"))
        return self._commit()

    def _add(self, record: dict[str, Any]) -> None:
        self.done.append(record)
        self.usage = self.usage + Usage.from_dict(record.get("usage"))

    def _start_group(self, group: ParallelGroup, record: dict[str, Any]) -> None:
        """Schedule the group's branch heads, up to its bound; the rest wait in its queue."""
        if group.join in self.groups:
            return  # another route of the same completion started it already
        entry: dict[str, Any] = {"arrived": [], "queued": [], "running": 0}
        self.groups[group.join] = entry
        for head in group.heads:
            edge = next((e for e in self.spec.routes_from(group.source) if head in e.targets), None)
            mapper = edge.input if edge is not None and edge.input is not None else self.spec.node_named(head).input
            text = self._input_for(head, mapper, (group.source,))
            if entry["running"] < group.max_concurrency:
                entry["running"] += 1
                self._schedule_text(head, text, (record["id"],), head)
            else:
                entry["queued"].append([head, text, [record["id"]]])

    def _arrive(self, group: ParallelGroup, record: dict[str, Any]) -> None:
        """A branch reached the join: start a queued branch, or, when it was the last, the join."""
        entry = self.groups[group.join]
        entry["arrived"].append(group.branch_of(record["node"]))
        entry["running"] -= 1
        if entry["queued"]:
            head, text, predecessors = entry["queued"].pop(0)
            entry["running"] += 1
            self._schedule_text(head, text, predecessors, head)
        if len(entry["arrived"]) < len(group.heads):
            return
        del self.groups[group.join]
        latest = self.latest()
        feeding = [name for name in group.feeding if name in latest]
        mapper = group.fan_in.input if group.fan_in is not None else None
        self._schedule(group.join, mapper, feeding, tuple(latest[name]["id"] for name in feeding), None)

    def _schedule(
        self,
        target: str,
        edge_mapper: StateCallback | None,
        incoming: Sequence[str],
        predecessors: Sequence[str],
        branch: str | None,
    ) -> None:
        """Schedule ``target`` with its input: the route's mapper, else the node's, else the default."""
        mapper = edge_mapper if edge_mapper is not None else self.spec.node_named(target).input
        self._schedule_text(target, self._input_for(target, mapper, incoming), predecessors, branch)

    def _input_for(self, target: str, mapper: StateCallback | None, incoming: Sequence[str]) -> str:
        """``target``'s input: the mapper's value on a frozen state, else the default (no state copied)."""
        if mapper is not None:
            return _mapped(mapper, self.graph_state(target, incoming))
        latest = self.latest()
        return _default_input(
            self.message.text, [(name, _output_of(latest[name])) for name in incoming if name in latest]
        )

    def _schedule_text(self, target: str, text: str, predecessors: Sequence[str], branch: str | None) -> None:
        self.count += 1
        if self.count > self.spec.max_steps:
            raise AssemblyLimitError(
                f"graph run {self.scope.run.id} reached max_steps ({self.spec.max_steps}) before node {target} "
                "could run; raise max_steps or make the routes end sooner"
            )
        key = node_step_key(FRAME_PATH, self.count, target)
        self.active.append(key)
        step_input = _node_input(target, self.count, text, predecessors, branch)
        self.new_steps.append(NewStep(key, self.state.id, GRAPH_NODE_KIND, step_input))

    def _checkpoint(self, phase: str = DRIVEN_PHASE) -> DrivenCheckpoint:
        data = {
            "count": self.count,
            "active": self.active,
            "done": self.done,
            "groups": self.groups,
            "definition": _carried(self.definition),
            "assembly_id": self.assembly_id,
        }
        return next_checkpoint(self.state.checkpoint, phase=phase, usage=self.usage.to_dict(), data=data)

    def _commit(self) -> StepCommit:
        scope = self.scope
        return scope.commit_for(self.state, self._checkpoint(), step_result={}, new_steps=self.new_steps)

    def _finish(self, record: dict[str, Any]) -> StepCommit:
        """The commit that completes the run with the finish node's answer and the trajectory."""
        checkpoint = self._checkpoint("done")
        checkpoint.last_text = record.get("text") or ""
        result = graph_result(self.done, record, self.spec)
        return self.scope.completion(self.state, checkpoint, result, [], [])


def graph_result(done: Sequence[Mapping[str, Any]], finish: Mapping[str, Any], spec: GraphSpec) -> RunResult:
    """The run's RunResult: the finish node's answer, the total usage, and every node as a Step."""
    steps = tuple(_step_of(record, spec) for record in done)
    usage = Usage()
    for record in done:
        usage = usage + Usage.from_dict(record.get("usage"))
    answer = node_result(finish)
    return RunResult(
        message=answer.message,
        stop_reason="end_turn",
        usage=usage,
        messages=(),
        state={},
        structured_result=answer.structured_result,
        steps=steps,
        trajectory=Trajectory(steps),
    )


def _step_of(record: Mapping[str, Any], spec: GraphSpec) -> Step:
    assembly = spec.node_named(record["node"]).assembly
    return Step(
        id=record["id"],
        participant=record["node"],
        assembly_id=str(getattr(assembly, "assembly_id", getattr(assembly, "agent_id", record["node"]))),
        assembly_kind=str(getattr(assembly, "assembly_kind", "agent")),
        status=record["status"],
        attempts=attempts_of(record),
        output=_output_of(record) if record["status"] == "completed" else None,
        predecessor_ids=tuple(record.get("predecessors", ())),
        branch_id=record.get("branch"),
    )


def _group_with_branch_node(spec: GraphSpec, node: str) -> ParallelGroup | None:
    return next((group for group in spec.groups if group.branch_of(node) is not None), None)


def _group_started_by(spec: GraphSpec, node: str, target: str) -> ParallelGroup | None:
    return next((group for group in spec.groups if group.source == node and target in group.heads), None)


def _mapped(mapper: StateCallback, state: GraphState) -> str:
    """An input mapper's value as the node's input text: a string as is, anything else as JSON."""
    value = mapper(state)
    if isinstance(value, str):
        return value
    if isinstance(value, Message):
        return value.text
    return json.dumps(value, ensure_ascii=False, default=str)


def _default_input(original: str, incoming: Sequence[tuple[str, Any]]) -> str:
    """The original task, then each immediate predecessor's output labelled by node (the spec's form)."""
    if not incoming:
        return original
    parts = [
        f"From {name}:\n{output if isinstance(output, str) else json.dumps(output, ensure_ascii=False)}"
        for name, output in incoming
    ]
    return f"Original Task:\n{original}\n\nInputs from previous nodes:\n\n" + "\n\n".join(parts)


def _recovery_input(original: str, failed: Mapping[str, Any]) -> str:
    return f"Original Task:\n{original}\n\nNode {failed['node']} failed:\n{failed.get('error') or 'unknown error'}"


__all__ = [
    "FRAME_PATH",
    "NodeCommit",
    "graph_result",
    "graph_start",
    "node_result",
    "run_spec",
]
