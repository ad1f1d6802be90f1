"""A step's child run: started once under an id derived from the step, then waited for to its end.

A step that runs another assembly (a Graph node's Agent, Workflow, Swarm or Graph)
runs it as a run of its own, so the child is durable, resumable and visible in
``lg runs`` like any run. Its id is derived from the parent run's id and the step's
key: a step executed again (its worker died, its lease expired) finds the child
the first attempt started instead of starting a second one, and reads its result
when it has ended. A retry of the parent (lg_core.replay) begins a new history
epoch, in which a step whose child failed starts a fresh one (``step_child_id``).

How the step waits depends on where it runs. A local step (``ask`` without a
broker) drives the child on its own thread, nested on the runtime's dispatcher;
a child left unfinished by a crashed process is resumed here. A worker's step
starts the child on the workers and *parks*: it commits as ``waiting`` (no holder,
no lease, out of the outbox), holding no thread, and the commit that ends the
child puts it back in the outbox in the same transaction (the child's row names
it: ``parent_run_id``, ``parent_step_key``). Executed again, it finds the child
ended and reads its result. The child carries the parent's deadline, and the
parent's ending asks its running children to stop.

The child's events reach the parent's caller as ``agent_stream`` wrappers
(lg_core.agent_stream): a local child is linked to its parent while it runs, a
child on the workers carries the chain of its enclosing runs in its invocation
(docs/architecture.md, "Agent streams").
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from lg_core.agent_stream import AgentStreamLink, AgentStreamStep, chain_for
from lg_core.engine.driven_frames import StaleStep
from lg_core.entrypoints import import_entrypoint
from lg_core.errors import RunNotFoundError
from lg_core.invocation import Invocation
from lg_core.run import Run

if TYPE_CHECKING:
    from collections.abc import Callable

    from lg_core.engine.driven_frames import FrameState, StepScope, Transition
    from lg_core.store import RunRecord, StepCommit


def child_run_id(parent_run_id: str, step_key: str, epoch: int = 0) -> str:
    """The id of the child run the step ``step_key`` of ``parent_run_id`` starts: the same for every attempt
    of the step in one history ``epoch`` (a retry of the parent begins the next one)."""
    seed = f"{parent_run_id}\n{step_key}" + (f"\n{epoch}" if epoch else "")
    return hashlib.sha256(seed.encode()).hexdigest()[:32]


def step_child_id(scope: StepScope, step_key: str) -> str:
    """The child run the step ``step_key`` (``scope``'s, or a call within it) works with now.

    Its id in the frame's history epoch. After a retry of the parent (a later epoch)
    a child an earlier epoch started is kept when it completed or still runs, so a
    node whose child finished but whose step never committed is not run twice; one
    that failed or was cancelled is replaced by a fresh child, which is what the retry
    asked for.
    """
    parent_id, epoch = scope.run.id, scope.frame.checkpoint.history_epoch
    current = child_run_id(parent_id, step_key, epoch)
    if epoch == 0:
        return current
    runtime: Any = scope.engine.runtime
    if _stored(runtime, current) is not None:
        return current
    for earlier in range(epoch - 1, -1, -1):
        record = _stored(runtime, child_run_id(parent_id, step_key, earlier))
        if record is not None:
            return record.id if record.status == "completed" or not record.finished else current
    return current


def is_first_execution(scope: StepScope) -> bool:
    """Whether ``scope`` is provably its step's first execution, so none of the children it derives ids
    for can exist yet and their look-up before a start is a wasted store round trip.

    Only a local step's attempt proves it: the runtime's drive executes each step once, and a
    step executed again (a crashed process's run resumed here) counts as attempt 2 or later
    (Engine.resume_refs). A worker's attempt does not: a parked step woken by its child's ending
    is claimed again from attempt 1, and must find that child. Nor does a later history epoch,
    whose steps may keep a child an earlier epoch started (``step_child_id``).
    """
    return scope.holder is None and scope.attempt == 1 and scope.frame.checkpoint.history_epoch == 0


def start_or_find_child(
    scope: StepScope,
    assembly: Any,
    message: Any,
    run_id: str,
    stream_step: AgentStreamStep | None,
    *,
    seen: dict[str, RunRecord] | None = None,
    first_execution: bool = False,
    **options: Any,
) -> Run | None:
    """The ended child run ``run_id`` of ``assembly`` asked ``message`` (started, resumed or read back),
    or None while it runs on workers: the step then parks until the child's ending wakes it.

    ``stream_step`` names the step in the ``agent_stream`` wrappers of the child's events
    (lg_core.agent_stream), None for an Agent's tool call, which no composite step encloses;
    ``options`` are the child's own invocation fields (a Workflow call's history, context, or a
    deadline sooner than the parent's for its timeout). A child found ended
    is read back from its stored record, which is put in ``seen`` (when given) so the caller need
    not read it again. ``first_execution`` (``is_first_execution(scope)``) skips the look-up of
    the child in the store: no earlier execution of the step can have started it."""
    runtime: Any = scope.engine.runtime
    record = None if first_execution else _stored(runtime, run_id)
    if record is not None and record.finished:
        if seen is not None:
            seen[run_id] = record
        return Run.from_record(record, runtime)
    distributed = scope.holder is not None
    parent = scope.run
    if not parent.include_agent_events:
        options.setdefault("include_agent_events", False)  # nobody above wants the wrappers: none are made
    else:
        # Someone above wants them: the child passes on its own children's too (a subagent's subagents).
        options.setdefault("include_agent_events", True)
        if distributed:
            options["agent_stream_chain"] = chain_for(parent, stream_step)  # its worker publishes them upward
    if record is None:
        child = assembly.build_run(
            message,
            run_id=run_id,
            cancellation_token=parent.cancellation_token,  # the child's token is a child of the parent's
            runtime=runtime,
            **{"deadline_at": parent.invocation.deadline_at, **options},
        )
        child.parent_step = (parent.id, scope.key)
        if not distributed:
            child.parent_waits_inline = True
            with _linked(scope, run_id, child.entrypoint_class, stream_step, child.invocation.message):
                return child.call()  # type: ignore[no-any-return]
        runtime.start_execution(child)
        return None
    if distributed:
        return None  # started by an earlier attempt, still running
    routed = Invocation.coerce(message).message  # as the child was asked it, like a new child's
    with _linked(scope, run_id, _record_entrypoint(runtime, run_id), stream_step, routed):
        return runtime.resume(run_id)  # type: ignore[no-any-return]  # a crash left it unfinished


@contextmanager
def _linked(
    scope: StepScope, run_id: str, entrypoint: Any, step: AgentStreamStep | None, message: Any
) -> Iterator[None]:
    """While a local child runs, its events reach the parent's stream as ``agent_stream`` wrappers
    (when the parent's caller wants them)."""
    if not scope.run.include_agent_events:
        yield
        return
    agent_id = getattr(entrypoint, "agent_id", None) if getattr(entrypoint, "assembly_kind", None) == "agent" else None
    engine = scope.engine
    engine.link_agent_stream(run_id, AgentStreamLink(scope.run.id, step, agent_id, message))
    try:
        yield
    finally:
        engine.unlink_agent_stream(run_id)


def _record_entrypoint(runtime: Any, run_id: str) -> Any:
    """The class a stored run executes, or None when it cannot be imported here."""
    try:
        return import_entrypoint(runtime.store.load_run(run_id).entrypoint)
    except Exception:  # noqa: BLE001 - a child without wrappers still runs
        return None


def stream_step(scope: StepScope, participant: str, step_id: str, branch: Any = None) -> AgentStreamStep:
    """The step ``scope`` of its assembly run, as ``agent_stream`` sources name it."""
    assembly = scope.run.entrypoint_class
    data = getattr(scope.frame.checkpoint, "data", {})
    stored = data.get("definition")  # a builder's run names its own id
    named = data.get("assembly_id") or (stored.get("assembly_id") if isinstance(stored, dict) else None)
    return AgentStreamStep(
        assembly_id=str(named or getattr(assembly, "assembly_id", assembly.__qualname__)),
        assembly_kind=str(getattr(assembly, "assembly_kind", "assembly")),
        participant=participant,
        step_id=step_id,
        branch_id=None if branch is None else str(branch),
    )


def ended_child(runtime: Any, run_id: str, *, seen: dict[str, RunRecord] | None = None) -> Run | None:
    """The child run ``run_id`` once it has ended, else None; its record put in ``seen`` as
    ``start_or_find_child`` puts it."""
    record = _stored(runtime, run_id)
    if record is None or not record.finished:
        return None
    if seen is not None:
        seen[run_id] = record
    return Run.from_record(record, runtime)


def _stored(runtime: Any, run_id: str) -> RunRecord | None:
    try:
        record: RunRecord = runtime.store.load_run(run_id)
    except RunNotFoundError:
        return None
    return record


def park_on_child(
    scope: StepScope,
    child_id: str,
    *,
    still_open: Callable[[FrameState], bool],
    after: Callable[[Run, str], Transition],
    what: str,
    seen: dict[str, RunRecord] | None = None,
) -> Transition:
    """The transition committing a step as waiting for its child run, unless the child has ended by then.

    ``still_open(state)`` says whether the frame still expects this step's commit
    (else it is stale); a child found ended commits ``after(child, child_id)``
    instead (its record put in ``seen``, as ``start_or_find_child`` puts it). The
    commit's guard (``child_run_ended``) re-runs this on the fresh frame when the
    child ends between the read here and the commit.
    """

    def park(state: FrameState) -> StepCommit:
        if not still_open(state):
            raise StaleStep(f"{what} {scope.key} is already committed")
        child = ended_child(scope.engine.runtime, child_id, seen=seen)
        if child is not None:
            return after(child, child_id)(state)
        return scope.commit_for(
            state, state.checkpoint, step_status="waiting", step_result={"waits_on": child_id}, waits_on=child_id
        )

    return park


__all__ = [
    "child_run_id",
    "ended_child",
    "is_first_execution",
    "park_on_child",
    "start_or_find_child",
    "step_child_id",
    "stream_step",
]
