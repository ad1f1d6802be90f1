"""A Workflow run's frame and its one step: ``perform`` run by deterministic replay until it settles.

A Workflow run is a run of kind ``workflow`` whose root frame the Workflow drives
(lg_core.engine.driven_frames). Its checkpoint's ``data`` holds ``calls``: every call
``perform`` made, by position, with its signature, its attempts' child runs and its
outcome once settled (lg_core.assemblies._workflow_calls); and ``definition``, the
AssemblyDefinition the run started with (``to_dict``; None for a class whose definition
names a lambda), whose ``perform`` a builder's run replays on any worker (``run_composition``).

The run has one step, ``root/perform`` (kind ``workflow``). Each execution runs ``perform``
from the top against the recorded calls, and ends in one of three commits:

* the completion: ``perform`` returned its final invocation unconsumed and that call
  completed; the run answers with its output, and the trajectory lists every call;
* the failure: ``perform`` raised (a child's error it did not handle, a
  ReplayDivergenceError, a ProtocolError for a consumed or missing final invocation);
* on a worker, the park: a call it needs runs on the workers; the commit records the calls
  so far and waits (no thread held) for one of the running children, guarded by that child
  still running. Every child run names this step, so each child's ending wakes it; woken,
  it replays ``perform`` again, and parks again while a call it needs still runs. A call
  waiting out its ``retry_delay`` parks the step with a timer (``wake_at``) as well, or alone.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

from lg_core.assemblies._graph_frame import FRAME_PATH
from lg_core.assemblies._workflow_calls import ReplayAgain, ReplayHost, WaitingForChildren
from lg_core.assemblies.child_runs import ended_child
from lg_core.assemblies.definition import AssemblyDefinition, WorkflowSpec
from lg_core.assemblies.trajectory import Attempt, Step, Trajectory
from lg_core.engine.driven_frames import (
    DRIVEN_PHASE,
    DrivenCheckpoint,
    DrivenStart,
    StepScope,
    Transition,
    next_checkpoint,
    run_history,
)
from lg_core.engine.recent_dict import DEFAULT_RUN_CACHE_SIZE, RecentDict
from lg_core.engine.workflow_steps import WORKFLOW_KIND, perform_step_key
from lg_core.errors import ReplayDivergenceError
from lg_core.messages import Message
from lg_core.result_schema import StructuredResult
from lg_core.run_result import RunResult
from lg_core.store import NewStep, StepCommit
from lg_core.usage import Usage

if TYPE_CHECKING:
    from lg_core.engine.driven_frames import FrameState

Composition = Callable[[Any], Any]  # a builder's ``perform``: a function of the workflow instance


def workflow_start(assembly_id: str, stored_definition: Any) -> DrivenStart:
    """The first checkpoint and step of a Workflow run: no calls yet, the perform step scheduled."""
    checkpoint = DrivenCheckpoint(phase=DRIVEN_PHASE, data={"calls": {}, "definition": stored_definition})
    first = NewStep(perform_step_key(FRAME_PATH), "", WORKFLOW_KIND, None)
    return DrivenStart("workflow", checkpoint, first, assembly_id)


# The compositions of the runs whose perform step this process executes, read once per run (a
# builder's is imported back from the stored definition): a run's definition never changes while it runs.
_RUN_COMPOSITIONS: RecentDict[str, tuple[Composition | None]] = RecentDict(DEFAULT_RUN_CACHE_SIZE)


def run_composition(run_id: str, stored: Mapping[str, Any] | None, workflow_class: Any) -> Composition | None:
    """The ``perform`` function run ``run_id`` started with (a builder's), or None for the class's own method.

    Read from the run's stored definition, so a builder given another ``perform`` after the run
    started, or a worker that never saw the builder, runs the one the run started with."""
    cached = _RUN_COMPOSITIONS.get(run_id, None)
    if cached is not None:
        return cached[0]
    definition = workflow_class.definition() if stored is None else AssemblyDefinition.from_dict(stored)
    spec = definition.spec
    assert isinstance(spec, WorkflowSpec)  # a Workflow run stores a Workflow's definition
    _RUN_COMPOSITIONS[run_id] = (spec.perform,)
    return spec.perform


class WorkflowStep:
    partial_text = ""  # the workflow streams no text of its own (StepBody)

    def __init__(
        self, scope: StepScope, workflow_class: Any, composition: Composition | None = None, name: str | None = None
    ) -> None:
        self.scope, self.workflow_class, self.composition = scope, workflow_class, composition
        self.name = name or workflow_class.__qualname__  # how errors name the workflow

    def perform(self) -> Transition:
        self.scope.check_interrupt()
        calls = copy.deepcopy(self.scope.frame.checkpoint.data.get("calls") or {})  # type: ignore[attr-defined]
        return self._decide(calls)

    def _decide(self, calls: dict[str, dict[str, Any]]) -> Transition:
        """Replay ``perform`` until it settles, parks or fails; the transition that commits which."""
        while True:
            host = ReplayHost(self.scope, calls, self.name)
            try:
                final = self._replay(host)
            except ReplayAgain:
                continue
            except WaitingForChildren as waiting:
                return self._park(calls, waiting.running, waiting.wake_at)
            except Exception as error:  # noqa: BLE001 - whatever perform raised is the run's failure
                self.scope.check_interrupt()  # a cancel or deadline that stopped a child stops the run as such
                return self.scope.ending("failed", host.divergence or error)
            return self._complete(calls, final)

    def _replay(self, host: ReplayHost) -> int:
        """One execution of ``perform`` from the top; the position of its settled final call."""
        invocation = self.scope.run.invocation
        workflow = self.workflow_class(  # its history: its session's, else the invocation's
            invocation.message, history=run_history(self.scope), context=invocation.context.to_dict(), host=host
        )
        composition = self.composition
        returned = workflow.perform() if composition is None else composition(workflow)
        final = workflow.final_invocation(returned)
        host.final = final
        final.consume(host.run_invocation(final))
        unasked = sorted(set(host.calls) - host.asked, key=int)
        if host.divergence is None and unasked:
            recorded = host.calls[unasked[0]]
            host.divergence = ReplayDivergenceError(
                f"{self.name}.perform diverged on replay: it first invoked {recorded['name']} at call "
                f"#{unasked[0]}, and now returns before making that call",
                recorded=recorded["signature"],
                asked=None,
            )
        if host.divergence is not None:
            raise host.divergence
        return int(final.request.index)

    def _park(self, calls: dict[str, dict[str, Any]], running: list[str], wake_at: float | None) -> Transition:
        """Commit the calls so far and wait for a running child, and until ``wake_at`` when a call's
        ``retry_delay`` is being waited out (the scheduler's ``wake_timed_steps`` wakes the step then);
        if every running child has ended by the commit, replay ``perform`` again instead (the commit's
        guard, ``child_run_ended``, re-runs this)."""
        scope = self.scope

        def park(state: FrameState) -> StepCommit:
            runtime = scope.engine.runtime
            waits_on = next((child for child in running if ended_child(runtime, child) is None), None)
            if waits_on is None and (running or wake_at is None):
                return self._decide(calls)(state)
            checkpoint = state.checkpoint.copy()
            assert isinstance(checkpoint, DrivenCheckpoint)  # a workflow frame's checkpoint
            checkpoint.data = {**checkpoint.data, "calls": calls}
            checkpoint.usage = _usage_of(calls).to_dict()
            return scope.commit_for(
                state,
                checkpoint,
                step_status="waiting",
                step_result={"waits_on": waits_on, "waits_until": wake_at},
                waits_on=waits_on,
                wake_at=wake_at,
            )

        return park

    def _complete(self, calls: dict[str, dict[str, Any]], final: int) -> Transition:
        scope = self.scope

        def complete(state: FrameState) -> StepCommit:
            answer = calls[str(final)]
            checkpoint = next_checkpoint(
                state.checkpoint, phase="done", usage=_usage_of(calls).to_dict(), data={"calls": calls}
            )
            checkpoint.last_text = answer.get("text") or ""
            return scope.completion(state, checkpoint, workflow_result(calls, final), [], [])

        return complete


def workflow_result(calls: Mapping[str, Mapping[str, Any]], final: int) -> RunResult:
    """The run's RunResult: the final call's answer, every attempt's usage, and every call as a Step."""
    answer = calls[str(final)]
    structured = answer.get("structured")
    steps = tuple(_step_of(int(index), calls[index]) for index in sorted(calls, key=int))
    return RunResult(
        message=Message("assistant", answer.get("text") or ""),
        stop_reason="end_turn",
        usage=_usage_of(calls),
        messages=(),
        state={},
        structured_result=None if structured is None else StructuredResult(**structured),
        steps=steps,
        trajectory=Trajectory(steps),
    )


def _usage_of(calls: Mapping[str, Mapping[str, Any]]) -> Usage:
    usage = Usage()
    for record in calls.values():
        for attempt in record["attempts"]:
            usage = usage + Usage.from_dict(attempt.get("usage"))
    return usage


def _step_of(index: int, record: Mapping[str, Any]) -> Step:
    signature = record["signature"]
    attempts = tuple(
        Attempt(
            number=item["number"],
            started_at=datetime.fromisoformat(item["started_at"]),
            finished_at=datetime.fromisoformat(item["finished_at"]),
            status=item["status"],
            usage=Usage.from_dict(item.get("usage")),
            error=item.get("error"),
        )
        for item in record["attempts"]
    )
    status = record.get("outcome") or "running"
    if status == "failed" and attempts:
        status = attempts[-1].status
    structured = record.get("structured")
    return Step(
        id=f"{record['name']}-{index + 1}",
        participant=record["name"],
        assembly_id=signature["assembly_id"],
        assembly_kind=signature["assembly_kind"],
        status=status if status in ("completed", "failed", "partial", "cancelled", "timed_out") else "failed",
        attempts=attempts,
        output=(record.get("text") if structured is None else structured["value"]) if status == "completed" else None,
    )


__all__ = ["WorkflowStep", "workflow_result", "workflow_start"]
