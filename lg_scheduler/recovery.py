"""Recovery sweeps: what brings a distributed run back when a process or Redis lets it down.

The run store is the source of truth and the broker only transport, so every
sweep reads the store, decides from it alone, and then either re-enqueues work
or ends a run. None of them executes a step: a re-enqueued step goes through
the task protocol (look up, claim, execute, commit) like any other, which is
what makes a duplicate message harmless.

    relay_outbox       a scheduled step whose message never arrived (the process
                       died between commit and publish, or Redis lost it); a
                       step nobody consumes is re-sent ever more rarely (a
                       step sent to one process's own queue: at least every
                       lease period, see _routed)
    sweep_leases       a running step whose holder died (same host: at once;
                       elsewhere: when its lease expires, or a lease period
                       after a store outage that let it expire); a step nobody
                       takes over is re-sent ever more rarely
    detect_stalled     a run with no commit for a long time (a backstop for open
                       steps no sweep or holder sees to; a run with no open step
                       at all is logged as an inconsistency)
    end_runs           a cancel request or a passed deadline that no live step
                       will act on: the run ends ``cancelled`` or ``partial``, and
                       the steps it left open close with it
    activate_sessions  a session whose runs are all pending (the run before them
                       ended without the commit that starts the next one)

Every write is a conditional statement, so several schedulers (or several
``lg.recover`` tasks) may sweep at once: the loser of a race does nothing.
Only distributed runs are swept; a local run belongs to the process holding it
(``lg runs resume`` takes it over when that process dies).

Leases, the relay's due times and deadlines are judged by the store's clock
(``RunStore.clock``: the PostgreSQL server's), never by this host's, which may
run ahead of the workers' (re-dispatching live steps) or behind (leaving dead
ones): see lg_core.store._clock.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol

from lg_core.engine.dispatcher import StepRef
from lg_core.engine.step_kinds import is_step_kind, task_name_for
from lg_core.errors import CancelledError, DeadlineExceededError
from lg_core.lease_holders import holder_is_dead, holder_is_local
from lg_core.store import RunStore, StepRecord
from lg_core.store.records import RelayedStep
from lg_workers.queues import queue_for

if TYPE_CHECKING:
    from lg_core.engine.engine import Engine

log = logging.getLogger("lg_scheduler.recovery")


class Publisher(Protocol):
    """Where recovery re-enqueues work: the CeleryBackend (``publish`` / ``advance``)."""

    def publish(self, refs: list[StepRef]) -> None: ...

    def advance(self, run_id: str) -> None: ...


class LostTaskReport(Protocol):
    """Reports the tasks that held steps whose holders are gone (lg_scheduler.lost_tasks.LostTasks)."""

    def report_lost(self, steps: Iterable[StepRecord]) -> int: ...


def relay_outbox(
    store: RunStore,
    publisher: Publisher,
    *,
    limit: int = 500,
    holder_backoff: float | None = None,
    grace: OutageGrace | None = None,
    local_liveness: bool = True,
) -> int:
    """Re-send scheduled steps whose message is overdue; returns how many.

    The store pushes each one's ``dispatch_after`` forward in the transaction that
    selects it, by a back-off that doubles with each send nobody consumed (from
    the relay grace up to ``relay_backoff_max``; lg_core.store.resend_backoff), so
    a queue without workers gets one duplicate per step per back-off, not one per
    grace. A step is reported once per back-off level, naming its queue.

    A step sent to the queue of the one process holding its code-mode program
    backs off at most ``holder_backoff`` (the lease period): its queue is
    consumed again only if that process lives, and once the process's holder
    lease has run out the next send goes to plain ``lg.sandbox`` (:func:`_routed`),
    so the wait for that send bounds how long the run stays stuck on a dead
    process. A live holder consumes its queue, so it gets few duplicates.
    ``grace``: holder leases a store outage let expire are spared meanwhile.
    ``local_liveness``: a holder on this host is judged by its process id (off:
    by its lease alone, as one on another host).
    """
    relayed = store.relay_due_steps(limit, _holder_backoff_max(store, holder_backoff))
    _send(publisher, [item.step for item in relayed], store, grace, local_liveness)
    for item in relayed:
        _report_relayed(item)
    return len(relayed)


def wake_timed_steps(store: RunStore, publisher: Publisher, *, limit: int = 500) -> int:
    """Send the parked steps whose timer passed (a subagent wait's long poll, a retry_delay); returns how many.

    A wait parks holding no worker, and nothing ends when its long poll does, so the
    step row carries ``wake_at`` and this pass, an indexed scan, puts the step back in
    the outbox and sends it: executed again, the wait answers ``still_working``, and an
    assembly step waiting out its ``retry_delay`` starts its next attempt.
    """
    woken = store.wake_timed_steps(limit)
    _send(publisher, woken, store)
    return len(woken)


def _report_relayed(item: RelayedStep) -> None:
    """One line per send, but a warning only when a step's back-off grew: at most one per level,
    however many scheduler passes it waits through."""
    step = item.step
    if not _report_backoff(item, "relayed"):
        log.info("relayed %s of run %s (%s)", step.key, step.run_id, _why_relayed(step))


def _report_backoff(item: RelayedStep, verb: str) -> bool:
    """Log a send whose step's message was already re-sent once without a consumer; False otherwise.

    A warning when the step's back-off grew (at most one per level: the relay's
    and the lease sweeper's alike), naming its queue and the worker to start; a
    debug line for the sends at an unchanged level.
    """
    step = item.step
    if item.missed < 2:
        return False
    queue = _queue_of(step)
    if item.new_level:  # its re-sent message was not consumed either
        log.warning(
            "step %s of run %s has waited at least %.0f s for a consumer on queue %s; sent again, and again in "
            "%.0f s unless a worker takes it: start one with `lg worker --queues %s` if none runs (or it is "
            "far behind)",
            step.key,
            step.run_id,
            item.waited,
            queue,
            item.delay,
            queue,
        )
    else:
        log.debug("%s %s of run %s again (no consumer on %s yet)", verb, step.key, step.run_id, queue)
    return True


def _queue_of(step: StepRecord) -> str:
    """The broker queue the relay sends ``step`` to (a step kind without a task: lg.advance's)."""
    return queue_for(task_name_for(step.kind))


def _why_relayed(step: StepRecord) -> str:
    """Why a scheduled step needed the relay: its last attempt raised and waited out its retry delay,
    or its message never reached a worker (a log that says "not delivered" of a step that keeps
    failing sends its reader after the broker instead of the error)."""
    if step.awaits_retry:
        error = step.error or {}
        return (
            f"attempt {step.attempts + 1}; attempt {step.attempts} "
            f"raised {error.get('name')}: `lg runs show {step.run_id}`"
        )
    return "its message was not delivered"


@dataclass(frozen=True, slots=True)
class OutageGrace:
    """Leases that ran out while the run store could not be reached, and how long their holders get.

    During a database outage no holder can renew its lease, so every lease
    running then expires, the live holders' as well as the dead ones'. A live
    holder whose step finished meanwhile is waiting to commit it
    (``store_outage_patience``); re-sending its step the moment the database is
    back would race that commit and usually win, running the step again (an
    ``at_most_once`` call then ends "outcome unknown" although its holder had
    the result). So a lease that expired at or after ``began`` (store clock: the
    last lease sweep before the outage, which judged every earlier expiry) is
    not taken as a sign of death until ``until`` (the store answering again,
    plus a lease period: time for a live holder's heartbeat to renew it). A
    holder on this host seen dead is still taken over at once.
    """

    began: float
    until: float

    def spares(self, step: StepRecord, now: float) -> bool:
        return self.spares_lease(step.lease_until, now)

    def spares_lease(self, lease_until: float | None, now: float) -> bool:
        """Whether a lease running until ``lease_until`` (expired by ``now``) is spared: the outage let it expire."""
        return now < self.until and lease_until is not None and lease_until >= self.began


def sweep_leases(
    store: RunStore,
    publisher: Publisher,
    *,
    hold_off: float,
    local_liveness: bool = True,
    limit: int = 1000,
    now: float | None = None,
    grace: OutageGrace | None = None,
    lost: LostTaskReport | None = None,
) -> int:
    """Re-send running steps whose holder is gone; returns how many.

    A holder is gone when its lease expired or, with ``local_liveness``, when it
    is a process on this host that no longer exists. The re-sent task's claim
    takes the step over; an ``at_most_once`` tool then reports "outcome unknown"
    instead of running again if the dead attempt had started it, and runs if it
    had not (lg_core.engine._at_most_once).

    The first re-send after a claim goes as soon as the holder is seen dead (a
    killed worker costs no wait). Until a worker claims the step, later re-sends
    back off as the relay's do, counted in the same ``relays`` column
    (lg_core.store.resend_backoff): ``hold_off`` after the first, then doubling
    with each re-send nobody took up to ``relay_backoff_max``. Sent every
    ``hold_off`` regardless, a step whose whole fleet is down gained a duplicate
    per lease period for as long as the outage lasted. Each new level is
    reported once, naming the queue and the worker to start.

    ``now``: the store's clock read before this call (default: read here).
    ``grace``: the leases an outage of the store let expire, spared for a while
    (:class:`OutageGrace`). ``lost``: told of each step taken from a dead holder,
    to end the holder's task in monitoring (lg_scheduler.lost_tasks).
    """
    now = store.clock() if now is None else now  # before the rows: a lease read later is judged no earlier than it is
    dead = [
        (item, why)
        for step, relays in store.running_steps(limit)
        if (why := _why_claim_is_dead(step, now, local_liveness, grace)) is not None
        and (item := store.mark_redispatched(step, relays, hold_off)) is not None
    ]
    _send(publisher, [item.step for item, _ in dead], store, grace, local_liveness)
    if lost is not None:
        lost.report_lost([item.step for item, _ in dead if item.missed == 0])  # a claim's first re-send
    for item, why in dead:
        _report_redispatched(item, why)
    return len(dead)


def _report_redispatched(item: RelayedStep, why: str) -> None:
    """The first re-send after a claim says why the claim died; later ones are reported as the relay's."""
    step = item.step
    if _report_backoff(item, "re-dispatched"):
        return
    if item.missed == 0:
        log.info("re-dispatched %s of run %s (%s)", step.key, step.run_id, why)
    else:
        log.info(
            "re-dispatched %s of run %s again (no worker took it within %.0f s; queue %s)",
            step.key,
            step.run_id,
            item.waited,
            _queue_of(step),
        )


def detect_stalled(store: RunStore, publisher: Publisher, *, stall_seconds: float, limit: int = 500) -> tuple[int, int]:
    """Re-send the untracked open steps of at most ``limit`` runs with no commit for ``stall_seconds``;
    returns (advanced, orphaned).

    A backstop behind the relay and the lease sweeper, for open steps neither of
    them sees to. A step one of them already sent (``relays`` > 0) is on its
    back-off, and one running under a live lease is its holder's: a quiet run
    whose open steps are all such is waiting (for a consumer, or a long step),
    not stalled, and re-sending them would add a duplicate per stall period on
    top of the back-off that holds them down. So only the other open steps are
    re-sent (a due step the relay never sent, a dead claim the sweeper has not
    reached), and a run counts as advanced when it had any. A step waiting out a
    failed attempt's retry delay is not due yet, and stays where it is.

    A run whose only unfinished step is parked on a child run (``waiting``) is not
    stalled: the child's ending wakes it. An orphaned run is running with no open
    or waiting step at all, which the commit protocol should make impossible; it is logged (once per stall period) for
    an operator, since nothing can be re-enqueued for it.
    """
    advanced = orphaned = 0
    for run_id in store.touch_stalled_runs(stall_seconds, limit):
        steps = store.open_steps_tracked(run_id)
        untracked = [step for step, tracked in steps if not tracked]
        if untracked:
            _send(publisher, untracked, store)
            advanced += 1
            log.info("re-sent %d open step(s) of run %s (no commit for %.0f s)", len(untracked), run_id, stall_seconds)
        elif steps:
            log.debug("run %s has no commit for %.0f s but its open steps are tracked", run_id, stall_seconds)
        elif any(step.status == "waiting" for step in store.load_steps(run_id)):
            # Parked on a child run (a Graph node): the child's ending wakes it.
            log.debug("run %s has no commit for %.0f s: a step waits for its child run", run_id, stall_seconds)
        else:
            orphaned += 1
            log.error(
                "run %s is running but has no open step; inspect it with `lg runs show %s`",
                run_id,
                run_id,
            )
    return advanced, orphaned


def end_runs(engine: Engine[Any], store: RunStore, *, local_liveness: bool = True, limit: int = 500) -> tuple[int, int]:
    """End runs whose cancel request or deadline no live step will act on; returns (cancelled, partial).

    A step running on a live holder checks cancellation and the deadline itself
    and ends the run with what it has; otherwise nothing would, so the run ends
    here (a cancel request wins over a passed deadline).
    """
    cancelled = partial = 0
    now = store.clock()
    for record in store.runs_to_end(limit):
        if record.status == "pending":  # its deadline passed while it waited for its session
            if engine.end_pending_past_deadline(record.id):
                log.info("ended run %s as partial (it never started)", record.id)
                partial += 1
            continue
        if _has_live_step(store.load_steps(record.id, open_only=True), now, local_liveness):
            continue
        outcome: Literal["cancelled", "partial"] = "cancelled" if record.cancel_requested else "partial"
        error = CancelledError() if record.cancel_requested else DeadlineExceededError()
        try:
            ended = engine.end_run(record.id, outcome, error)
        except Exception:  # noqa: BLE001 - e.g. the app's module is not importable here; the others still end
            log.exception("could not end run %s as %s", record.id, outcome)
            continue
        if ended:
            log.info("ended run %s as %s", record.id, outcome)
            cancelled += outcome == "cancelled"
            partial += outcome == "partial"
    return cancelled, partial


def activate_sessions(engine: Engine[Any], publisher: Publisher, *, limit: int = 100) -> int:
    """Start the next pending run of sessions none of whose runs is running; returns how many it started.

    A run's ending commit normally does this itself; a run ended some other way
    (by ``end_runs``, or by a process without this code) leaves its session's
    next run pending, and this picks it up. A session listed here may have a
    running run by the time it is activated (another scheduler's sweep or a
    commit got there first): it starts nothing then and is not counted.
    """
    started = 0
    for session_id, actor_id in engine.store.stalled_sessions(limit):
        activation = engine.activate_next_pending(session_id, actor_id)
        if activation.refs:
            publisher.publish(activation.refs)
        started += len(activation.runs)
        for run_id in activation.runs:
            log.info("started run %s, the next pending run of session %s", run_id, session_id)
    return started


def _claim_is_dead(step: StepRecord, now: float, local_liveness: bool) -> bool:
    return _why_claim_is_dead(step, now, local_liveness) is not None


def _why_claim_is_dead(
    step: StepRecord, now: float, local_liveness: bool, grace: OutageGrace | None = None
) -> str | None:
    """Why the scheduler may take this claim over, for its log; None while the claim holds.

    A dead process and an expired lease are told apart: a lease also expires
    under a holder that is alive but could not renew it (its database was
    down, its host was paused), and an operator reading "gone" there would
    look for a crash that never happened. A lease the store's own outage let
    expire is spared while ``grace`` lasts.
    """
    if local_liveness and holder_is_dead(step.holder):
        return f"holder {step.holder} is gone"
    if step.lease_until is None:
        return f"holder {step.holder} left no lease"
    if step.lease_until < now and not (grace is not None and grace.spares(step, now)):
        return f"the lease of holder {step.holder} expired {now - step.lease_until:.1f} s ago"
    return None


def _has_live_step(steps: Iterable[StepRecord], now: float, local_liveness: bool) -> bool:
    return any(step.status == "running" and not _claim_is_dead(step, now, local_liveness) for step in steps)


def _send(
    publisher: Publisher,
    steps: list[StepRecord],
    store: RunStore,
    grace: OutageGrace | None = None,
    local_liveness: bool = True,
) -> None:
    gone = _gone_program_holders(store, steps, grace, local_liveness)
    refs = [_routed(StepRef.of(s.run_id, s), s, gone) for s in steps if is_step_kind(s.kind)]
    if refs:
        publisher.publish(refs)
    for run_id in sorted({s.run_id for s in steps if not is_step_kind(s.kind)}):
        publisher.advance(run_id)


def _program_holder(step: StepRecord) -> str | None:
    """The process holding the code-mode program that ``step`` (a ``wait`` or ``stop``) observes, if any."""
    holder = (step.input or {}).get("program_holder")
    return holder if isinstance(holder, str) and holder else None


def _holder_backoff_max(store: RunStore, holder_backoff: float | None) -> Callable[[StepRecord], float] | None:
    """The relay's longest back-off for each step: ``holder_backoff`` at most for a step sent to one
    process's own queue (None: the store's ``relay_backoff_max`` for every step)."""
    if holder_backoff is None:
        return None
    longest = store.relay_backoff_max
    return lambda step: min(longest, holder_backoff) if _program_holder(step) else longest


def _gone_program_holders(
    store: RunStore, steps: list[StepRecord], grace: OutageGrace | None, local_liveness: bool = True
) -> set[str]:
    """The program holders of ``steps`` that will never consume their own queue again.

    A holder on this host is judged by its process id at once (with
    ``local_liveness``; without it, as one on another host). Any other is
    gone when its holder lease (lg_core.store._holder_leases) ran out by the
    store's clock, or it has none: it renews the lease every third of a lease
    period while it holds programs, however busy its steps keep it, and drops
    it once it holds none. A lease a store outage let expire is spared while
    ``grace`` lasts (its live holder could not renew it). Nothing is read
    unless a step observes a program; leases that cannot be read leave their
    holders presumed alive, so the steps already taken from the store this
    pass are still sent (to the holders' queues, to be judged again next time).
    """
    holders = {holder for step in steps if (holder := _program_holder(step)) is not None}
    if not holders:
        return set()
    if local_liveness:
        gone = {holder for holder in holders if holder_is_dead(holder)}
        elsewhere = {holder for holder in holders if not holder_is_local(holder)}
    else:
        gone, elsewhere = set(), holders
    if elsewhere:
        try:
            now = store.clock()  # before the rows: a lease read later is judged no earlier than it is
            leases = store.holder_leases(elsewhere)
        except Exception:  # noqa: BLE001 - judged on the next send; these steps go out now regardless
            log.warning("could not read the holder leases of %s; presumed alive this time", sorted(elsewhere))
            return gone
        gone |= {
            holder
            for holder in elsewhere
            if (until := leases.get(holder)) is None
            or (until < now and not (grace is not None and grace.spares_lease(until, now)))
        }
    return gone


def _routed(ref: StepRef, step: StepRecord, gone: set[str]) -> StepRef:
    """``ref``, sent to its kind's queue instead of its own when the process its own queue is named
    for is ``gone`` (:func:`_gone_program_holders`): a code-mode ``wait`` whose program's worker
    died then runs on any sandbox worker, which reports the program ``terminated``, and the run
    goes on. A holder alive, however busy, keeps the step in its queue."""
    if ref.queue and _program_holder(step) in gone:
        return dataclasses.replace(ref, queue="")
    return ref


__all__ = [
    "Publisher",
    "activate_sessions",
    "detect_stalled",
    "end_runs",
    "relay_outbox",
    "sweep_leases",
]
