"""Replay: retry a finished run from its last committed checkpoint,
or fork a new run from a chosen step.

    lg_core.retry(run_id)                                   # lg runs retry RUN_ID
    lg_core.fork(run_id, "root/turn-2/model", model="x")    # lg runs fork RUN_ID --from-step KEY

**retry** reopens the run itself. The step whose commit ended it goes back to
the outbox (``scheduled``, its ``attempts`` cut to at most 1, so a step that ran
out of ``max_step_attempts`` gets them again; an ``at_most_once`` call whose tool
had started keeps its mark and reports "outcome unknown" instead of running
twice, one that never reached its tool runs), together with every step the
ending closed before it finished (a parallel tool call, the open steps of a run
recovery ended, those of a run that waited for its session). The frame returns
to the last checkpoint committed before the ending (normally the checkpoint of
the step that scheduled the failed one; when a sibling tool call committed after
that, the sibling's, so its result is kept).
Steps committed before the failure are never redone. Which runs can be retried:

* ``failed``: yes, the usual case (a provider outage, a bug fixed since).
* ``cancelled``: yes; the cancel flag is cleared and the run goes on where it
  stopped (one cancelled while it waited for its session takes its turn now).
* ``partial``: no. Its deadline passed, and a retry keeps the run's invocation
  (workers may hold it in memory), so it would stop again at once. Fork it from
  the step that was cut off with a new ``deadline``; the error says which step.
  The same holds for a failed or cancelled run whose deadline has passed since.
* ``completed``, ``running`` or ``pending``: no (RunStateError naming what to do instead).

A run that failed while opening its conversation (a ``before_invocation``
callback) is retried from the start: the frame goes back to unopened and the
first step opens it again. A retry refuses while another run of the same
session is running or waiting (runs of one session never interleave), and
while the session has moved on since the run read it (another run of it
completed): that retry could only fail at completion, so fork instead.

**fork** makes a new run (``parent_run_id`` = the original) whose history is the
original's up to, not including, step ``from_step``: the checkpoint that step's
scheduler committed, the messages and durable events up to that commit (events
keep their numbers 1..N, the new run's own log continues from there), the
finished steps before it (with their checkpoints, so the fork can be retried or
forked in turn); then ``from_step`` and its siblings (the other steps the same
commit scheduled, e.g. the other tool calls of that turn) are the new run's
open steps. ``model`` overrides the agent's model for the new run (recorded as
the invocation's ``model_override``), ``settings`` are merged into the
original's (a None value removes one). Tool calls from ``from_step`` on run
again in the fork, under the fork's own idempotency keys. A fork has its own
session (its run id), which receives the fork's whole conversation when it
completes; the original's session is never changed by a fork. Forking from the
first model step re-opens the conversation in that new session, so history the
original loaded from its session is not carried over (the opening's checkpoint
is not kept on a step row).

An assembly's run (Graph, Swarm, Workflow) is retried the same way: its committed
nodes, member executions and settled calls are kept, and the re-run step starts a
fresh child run, since the retry begins a new history epoch, part of a child's id
(lg_core.assemblies.child_runs). It cannot be forked: its steps hold no
conversation, each participant's being a child run of its own, which can be forked.

Each is recorded in the log of the run it acts on: ``run_retried`` (which step,
the restored checkpoint, the previous outcome and error) and ``run_forked``
(the parent run, the step, the model and settings changes). The original of a
fork is not written to. Neither is in the original spec: they are this port's.

Where the run executes: with ``broker_url`` configured its steps are published
to the workers and a :class:`ReplayExecution` is returned at once; otherwise
it executes here on the LocalDispatcher (held by this process, so
``lg runs resume`` can take it over if this process dies) and the finished
Run is returned, as :func:`lg_core.resume` does.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from lg_core._fork_plans import COMMITTED_STATUSES, KEEP, fork_invocation, plan_fork, rekey, write_fork
from lg_core.engine.codec import encode_event_data
from lg_core.engine.dispatcher import StepRef
from lg_core.engine.step_kinds import STEP_KINDS
from lg_core.entrypoints import import_entrypoint
from lg_core.errors import InvocationError, RunStateError
from lg_core.events import StreamEvent, checked_consumer
from lg_core.execution import Execution, follow_events
from lg_core.invocation import Invocation
from lg_core.lease_holders import current_holder
from lg_core.run import Run
from lg_core.run_ids import run_id_to_look_up
from lg_core.run_selection import chosen_statuses, parse_age
from lg_core.runtime import Runtime, current_runtime
from lg_core.sessions.base import load_snapshot
from lg_core.store import RunRecord, StepRecord

EventCallback = Callable[[StreamEvent], None]
RETRYABLE = ("failed", "cancelled")
_EXECUTABLE = STEP_KINDS  # the kinds of step a retry or fork runs again (lg_core.engine.step_kinds)


class ReplayExecution(Execution):
    """The Execution of a retried or forked run on workers.

    ``events()`` without ``after`` starts at the ``run_retried`` / ``run_forked``
    event (``since_seq``), so a caller follows this replay, not the history
    before it (which, for a retry, ends in the earlier terminal event);
    ``lg_core.get_execution(run_id)`` reads the whole log.
    """

    def __init__(self, run_id: str, runtime: Runtime, backend: Any, since_seq: int) -> None:
        super().__init__(run_id, runtime, backend)
        self.since_seq = since_seq

    def events(self, after: str | None = None, **options: Any) -> Any:
        # A bare sequence number: "after durable event N, live position unknown".
        return super().events(str(self.since_seq - 1) if after is None else after, **options)


# -- retry ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RetryPlan:
    """What a retry changes: the ending step, the commit to go back to, the steps to run again."""

    ending: StepRecord | None
    restore: StepRecord
    reschedule: tuple[StepRecord, ...]


def retry(run_id: str, *, on_event: EventCallback | None = None, runtime: Runtime | None = None) -> Run | Execution:
    """Run a failed or cancelled run again from its last committed checkpoint.

    Returns the finished Run (executed here), or a ReplayExecution when a broker
    is configured. Raises RunNotFoundError for an unknown id and RunStateError
    (saying what to do instead) for a run that cannot be retried.
    """
    checked_consumer(
        on_event, InvocationError
    )  # before anything is written: a consumer failing later would cancel the run
    rt = _runtime(runtime)
    record = rt.store.load_run(run_id_to_look_up(run_id))
    _check_retryable(record)
    plan = plan_retry(record, rt.store.load_steps(record.id))
    if record.status == "partial" or (record.deadline_at is not None and record.deadline_at <= time.time()):
        raise RunStateError(_deadline_message(record, plan.reschedule[0].key))
    _check_session_unchanged(rt, record, plan)
    entrypoint: Any = import_entrypoint(record.entrypoint)  # fail before changing anything if it cannot run here
    if record.kind == "agent":
        # Its model too: an unresolvable one would reopen the run only to fail it again at once.
        invocation = Invocation.restore(record.invocation)
        rt.resolver.resolve(entrypoint.model_selection(invocation), invocation=invocation)
    distributed = _distributed(rt)  # (and the backend is built) before anything changes
    marker = reopen(rt, record, plan, holder=None if distributed else current_holder())
    return _continue(rt, record.id, _refs(record.id, plan.reschedule), marker, on_event, distributed)


def check_retry_statuses(statuses: str | Sequence[str]) -> tuple[str, ...]:
    """The statuses to retry, a bare ``"cancelled"`` included; only failed and cancelled runs can be."""
    return chosen_statuses(statuses, RETRYABLE, "only failed and cancelled runs can be retried")


def runs_to_retry(
    since: Any, *, statuses: str | Sequence[str] = ("failed",), limit: int = 100, runtime: Runtime | None = None
) -> list[RunRecord]:
    """The runs that ended with one of ``statuses`` in the last ``since`` (an age: ``"2h"``, seconds,
    a timedelta), oldest first: what to retry after an outage (``lg runs retry-failed``)."""
    window = parse_age(since, "since")
    chosen = check_retry_statuses(statuses)
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise InvocationError(f"limit must be a positive integer, got {limit!r}")
    rt = _runtime(runtime)
    cutoff = time.time() - window
    found = [record for status in chosen for record in rt.store.runs_finished_since(status, cutoff, limit)]
    return sorted(found, key=lambda record: (record.finished_at or 0.0, record.id))[:limit]


def _check_session_unchanged(rt: Runtime, record: RunRecord, plan: RetryPlan) -> None:
    """Refuse a retry that could only fail: its session moved on since the run read it.

    The run's completion appends its turn only to the history it started from, so
    it would redo its remaining steps (side effects included) and then fail with
    the session's ProtocolError. A fork continues from the same step as a new run.
    """
    info = (plan.restore.checkpoint or {}).get("session")
    store = rt.engine.sessions.store
    if not info or store is None:  # (sessions disabled)
        return
    snapshot = load_snapshot(store, record.session_id, record.actor_id)
    stored = 0 if snapshot is None else len(snapshot.messages)
    if stored != info.get("count"):
        raise RunStateError(
            f"session {record.session_id!r} has {stored} messages now, {info.get('count')} when run {record.id} "
            "began: another writer changed it since (a later run of the session, or the application through "
            "Session), so this run could not add its turn. Fork it "
            f"instead (lg runs fork {record.id} --from-step {plan.reschedule[0].key}) to continue as a new run"
        )


def reopen(rt: Runtime, record: RunRecord, plan: RetryPlan, *, holder: str | None) -> StreamEvent:
    """The retry's one transaction (see :meth:`RunStore.reopen_run`); returns its run_retried event.

    ``holder`` is this process for a run it executes itself, None for the workers.
    """
    data = {
        "step": plan.ending.key if plan.ending else None,
        "restored_from": plan.restore.key,
        "rescheduled": [s.key for s in plan.reschedule],
        "previous_outcome": record.status,
        "previous_error": record.error,
        "holder": holder,
    }
    frame = rt.store.load_frame(plan.restore.frame_id)
    checkpoint = _rewound(plan.restore.checkpoint or {}, frame.checkpoint)
    seq = rt.store.reopen_run(
        record.id,
        expected_status=record.status,
        invocation=record.invocation,
        deadline_at=record.deadline_at,
        holder=holder,
        frame_id=frame.id,
        frame_version=frame.version,
        checkpoint=checkpoint,
        message_count=int(checkpoint.get("message_count", 0)),
        reschedule=data["rescheduled"],
        event=("run_retried", encode_event_data(data)),
        serialize=rt.engine.sessions.enabled,
        session=(record.session_id, record.actor_id),
    )
    rt.engine.forget_run(record.id)
    return StreamEvent.build("run_retried", **data).with_seq(seq)


def _rewound(restored: dict[str, Any], current: dict[str, Any] | None) -> dict[str, Any]:
    """The restored checkpoint in a new history epoch, so no process reuses messages cached before the retry."""
    epoch = max(int(restored.get("history_epoch", 0)), int((current or {}).get("history_epoch", 0))) + 1
    return {**restored, "history_epoch": epoch}


def _refuse_assembly_fork(record: RunRecord) -> None:
    """Only an Agent's run forks: a fork re-runs a conversation from one of its model or tool steps, and an
    assembly's run has none (its participants' conversations are their own child runs)."""
    if record.kind != "agent":
        raise InvocationError(
            f"run {record.id} is a {record.kind} run, which cannot be forked: its steps run its participants as "
            "child runs of their own and hold no conversation to fork. Retry it to re-run its failed step "
            f"(lg runs retry {record.id}), fork the participant's child run from one of its steps "
            f"(`lg runs show {record.id}` lists them), or ask the {record.kind} again"
        )


def _check_retryable(record: RunRecord) -> None:
    run_id = record.id
    if record.status == "running":
        raise RunStateError(
            f"run {run_id} is still running, so there is nothing to retry; if its process died continue it with "
            f"`lg runs resume {run_id}`, or stop it with `lg runs cancel {run_id}`"
        )
    if record.status == "completed":
        raise RunStateError(
            f"run {run_id} completed, so there is nothing to retry; to run part of it again fork it from a step: "
            f"`lg runs fork {run_id} --from-step STEP` (`lg runs show {run_id}` lists the steps)"
        )
    if record.status not in RETRYABLE and record.status != "partial":
        raise RunStateError(f"run {run_id} is {record.status}; only failed or cancelled runs can be retried")


def _deadline_message(record: RunRecord, step: str) -> str:
    passed = datetime.fromtimestamp(record.deadline_at or 0, UTC).isoformat(timespec="seconds")
    return (
        f"run {record.id} is {record.status} and its deadline passed ({passed}), so a retry would stop at once; "
        f"fork it from the step that was cut off with a new deadline instead: "
        f"`lg runs fork {record.id} --from-step {step} --deadline SECONDS` "
        f"(lg_core.fork({record.id!r}, {step!r}, deadline=SECONDS))"
    )


def plan_retry(record: RunRecord, steps: Sequence[StepRecord]) -> RetryPlan:
    """The ending step, the last commit before it on its frame, and what must run again."""
    closed = [s for s in steps if s.status in ("failed", "cancelled") and s.kind in _EXECUTABLE]
    endings = [s for s in closed if s.event_seq is not None]
    ending = max(endings, key=lambda s: s.event_seq or 0) if endings else None
    # Steps closed with their run before they finished: those its ending left open (a parallel
    # call, the open steps of a run recovery ended), or those of a run ended while it waited for its session.
    never_ran = [s for s in closed if s.event_seq is None]
    frame_id = ending.frame_id if ending else f"{record.id}/root"
    committed = [
        s
        for s in steps
        if s.frame_id == frame_id
        and s.status in COMMITTED_STATUSES
        and s.checkpoint is not None
        and s.event_seq is not None
    ]
    if not committed:
        raise RunStateError(
            f"run {record.id} has no committed checkpoint to retry from (it was stored by an older version); "
            "start it again instead"
        )
    restore = max(committed, key=lambda s: s.event_seq or 0)
    # Steps an ending left open: only in runs ended by a version that did not close them.
    open_steps = [s for s in steps if s.status in ("scheduled", "running") and s.kind in _EXECUTABLE]
    reschedule = tuple(([ending] if ending else []) + never_ran + open_steps)
    if not reschedule:
        raise RunStateError(
            f"run {record.id} ended ({_error_text(record)}) without a step to run again; nothing was committed "
            "to continue from, so start it again instead"
        )
    return RetryPlan(ending, restore, reschedule)


def _error_text(record: RunRecord) -> str:
    error = record.error or {}
    return f"{error.get('name', 'error')}: {error.get('message', '')}" if error else record.status


# -- fork ----------------------------------------------------------------------------------------


def fork(
    source_run_id: str,
    /,
    from_step: str,
    *,
    run_id: str | None = None,
    model: Any = None,
    settings: Mapping[str, Any] | None = None,
    deadline: Any = KEEP,
    on_event: EventCallback | None = None,
    runtime: Runtime | None = None,
) -> Run | Execution:
    """A new run with ``source_run_id``'s history before step ``from_step``, continued live from there.

    ``run_id`` names the new run (default: random); ``model`` (a role, target or
    mapping) replaces the agent's model; ``settings`` are merged into the
    original's; ``deadline`` (seconds from now, a datetime, or None for none)
    replaces the original's. Returns the finished Run, or a ReplayExecution when
    a broker is configured. Raises RunNotFoundError for an unknown run,
    InvocationError (listing the valid keys) for a step that cannot be forked
    from, ConfigurationError for an unknown model.
    """
    checked_consumer(
        on_event, InvocationError
    )  # before anything is written: a consumer failing later would cancel the run
    _check_deadline(deadline)
    rt = _runtime(runtime)
    record = rt.store.load_run(run_id_to_look_up(source_run_id))
    _refuse_assembly_fork(record)
    if not isinstance(from_step, str) or not from_step:
        raise InvocationError(f"from_step must be a step key like 'root/turn-2/model', got {from_step!r}")
    steps = rt.store.load_steps(record.id)
    plan = plan_fork(record, steps, from_step)
    invocation = fork_invocation(record, run_id, model, settings, deadline)
    if model is not None:
        rt.resolver.resolve(model)  # ConfigurationError now, not in the new run's first model turn
    import_entrypoint(record.entrypoint)
    distributed = _distributed(rt)  # (and the backend is built) before anything is written
    marker = write_fork(
        rt,
        record,
        plan,
        invocation,
        holder=None if distributed else current_holder(),
        changes={"model": model, "settings": dict(settings) if settings is not None else None},
    )
    new_id = invocation.run_id
    refs = [StepRef(new_id, s.key, s.kind, rekey(s.frame_id, record.id, new_id)) for s in plan.open_steps]
    return _continue(rt, new_id, refs, marker, on_event, distributed)


# -- shared --------------------------------------------------------------------------------------


def _runtime(runtime: Runtime | None) -> Runtime:
    return runtime if runtime is not None else current_runtime()


def _distributed(rt: Runtime) -> bool:
    """Replayed runs go to the workers when a broker is configured, as start_execution does.

    The backend is built and the broker pinged here, before the caller writes
    anything, so a missing lg_workers or an unreachable broker fails without
    leaving a reopened run that nobody executes.
    """
    url = rt.configuration.broker_url
    if not url:
        return False
    rt.backend.check_reachable()  # builds it (ConfigurationError) and attaches the Redis event sink
    return True


def _check_deadline(deadline: Any) -> None:
    """Refuse a number of seconds no clock can hold (``float()`` of it overflows) as too far ahead."""
    if isinstance(deadline, int) and not isinstance(deadline, bool):
        try:
            float(deadline)
        except OverflowError:
            # (The value is not shown: a huge int may be too long to print.)
            problem = "is negative" if deadline < 0 else "is too far in the future"
            raise InvocationError(
                f"deadline {problem} (an integer of {deadline.bit_length()} bits); "
                "pass a non-negative number of seconds from now, a datetime, or None for no deadline"
            ) from None


def _refs(run_id: str, steps: Sequence[StepRecord]) -> list[StepRef]:
    return [StepRef.of(run_id, s) for s in steps]


def _continue(
    rt: Runtime,
    run_id: str,
    refs: list[StepRef],
    marker: StreamEvent,
    on_event: EventCallback | None,
    distributed: bool,
) -> Run | Execution:
    """Execute a reopened or new run's open steps: on the workers, or here until it ends."""
    if distributed:
        backend = rt.distributed_backend()
        rt.engine.publish(run_id, marker)
        backend.publish(refs)
        execution = ReplayExecution(run_id, rt, backend, marker.seq or 0)
        if on_event is not None:
            follow_events(execution, on_event)
        return execution
    run = rt.restored_run(rt.store.load_run(run_id))
    run._on_event = on_event
    run._begin()
    rt.engine.attach(run)

    def first_steps() -> list[StepRef]:
        rt.engine.publish(run_id, marker)
        return refs

    return rt.drive_here(run, first_steps)


__all__ = [
    "ReplayExecution",
    "RetryPlan",
    "fork",
    "plan_retry",
    "reopen",
    "retry",
]
