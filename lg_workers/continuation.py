"""Eager continuation: a task runs its step's successor itself when this worker consumes its queue.

Why: a Celery hop (publish, broker, pick-up, ack) costs more than a step of
the engine, so a run whose every step waited for one spent most of its time
in the queue (bench/distributed.py: the hop alone was 2.8 ms, the claim and
durable commit the step protocol asks of a step 1.7 ms more, so a step could not come
near 1.5 hops). A worker that consumes the successor's queue would take the
message itself a hop later; running the successor at once saves the hop and
changes nothing else: the successor is claimed, executed and committed through
the same protocol (``Engine.execute_claimed``), with its lease, its holder and
its attempt count, exactly as if its message had arrived. Temporal's "eager
activity execution" makes the same trade. The claim itself rides on the commit
that schedules the successor (``Chain.pick``, lg_core.engine._preclaim), which
saves the step its own claim transaction.

What stays as it was:

* Steps of other queues (a tool call on a prefork ``lg.tools`` worker) and the
  other successors of a step (the parallel tool calls of one turn) are
  published as usual, before the inline step starts, so they run in parallel.
* Recovery: an inline step has a claimed row like any other. If the process
  dies, a prefork child's message is redelivered (its step is done, and the
  redelivered copy re-announces steps held by a dead process on this host),
  and a whole worker's steps come back through the sweeper.
* Flower: each inline step is announced with task events under its own task
  id and name (``lg.tool_call`` ...), ids only, so it is listed like a
  delivered task, with its state, runtime and worker.

Bounds: a chain stops (and publishes what comes next) after ``MAX_CHAIN_STEPS``
steps or ``MAX_CHAIN_SECONDS``, because the first step's message stays unacked
until the task returns (``acks_late``), and as soon as the worker is shutting
down, so a warm shutdown does not wait for a whole run.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import uuid
from typing import Any

from lg_core.engine.dispatcher import StepRef
from lg_core.engine.run_endings import RunEnding
from lg_core.engine.step_kinds import STEP_KINDS
from lg_workers.queues import queue_for
from lg_workers.task_display import display_args
from lg_workers.task_outcomes import RunFailed, task_result

log = logging.getLogger(__name__)

MAX_CHAIN_STEPS = 100
MAX_CHAIN_SECONDS = 60.0
_STEP_TASKS = frozenset(kind.task_name for kind in STEP_KINDS.values())  # the tasks that execute a step


def consumed_queues(task: Any) -> frozenset[str]:
    """The queues this worker process consumes (``-Q``); empty outside a worker."""
    try:
        return frozenset(task.app.amqp.queues.consume_from or ())
    except Exception:  # noqa: BLE001 - no worker context (a task called directly): run nothing inline
        return frozenset()


def shutting_down() -> bool:
    """Has the worker been asked to stop (warm or cold shutdown)?

    Celery stores the exit code there, which is 0 for a clean stop: only None and
    False mean "keep going" (as in ``celery.worker.state.maybe_shutdown``).
    """
    from celery.worker import state

    return any(flag is not None and flag is not False for flag in (state.should_stop, state.should_terminate))


class Chain:
    """The steps one task runs: its own, then successors it may take itself."""

    def __init__(
        self, queues: frozenset[str], *, max_steps: int = MAX_CHAIN_STEPS, max_seconds: float = MAX_CHAIN_SECONDS
    ) -> None:
        self.queues = queues
        self.max_steps = max_steps
        self.deadline = time.monotonic() + max_seconds
        self.steps = 1
        self.picked: StepRef | None = None  # pre-claimed by the last commit (pick)

    def pick(self, offered: list[StepRef]) -> StepRef | None:
        """The step of ``offered`` this chain will run next, asked while its commit is built.

        The engine has the commit claim it (lg_core.engine._preclaim), so ``take``
        must then return it: the claim holds it for this thread, and nobody else
        would run it before its lease ran out.
        """
        self.picked = self._first_of_ours(offered)
        return self.picked

    def take(self, successors: list[StepRef]) -> tuple[StepRef | None, list[StepRef]]:
        """Split ``successors`` into the one to run here next (or None) and the ones to publish."""
        picked, self.picked = self.picked, None
        following = picked if picked is not None and picked in successors else self._first_of_ours(successors)
        if following is None:
            return None, successors
        self.steps += 1
        return following, [ref for ref in successors if ref != following]

    def _first_of_ours(self, successors: list[StepRef]) -> StepRef | None:
        if self.steps >= self.max_steps or time.monotonic() >= self.deadline or shutting_down():
            return None
        return next(
            (
                ref
                for ref in successors
                if ref.task_name in _STEP_TASKS and (ref.queue or queue_for(ref.task_name)) in self.queues
            ),
            None,
        )


class Announcer:
    """Sends the task events a delivered step would have produced, so Flower lists each inline step.

    One batch per inline step: the previous inline step's result goes with the
    next one's "received" and "started" (a batch of task events, like the ones
    Celery's own worker sends); the chain's last result when the chain ends.
    A sender thread publishes them, at most every ``TASK_EVENTS_LINGER``, so a
    step does not wait for Redis (nor spend its thread on kombu) between its
    commit and its successor's claim.
    Monitoring only: an event that cannot be sent (Redis down) never fails a step.
    """

    def __init__(self, task: Any) -> None:
        self.task = task
        self._pending: list[tuple[str, str, dict[str, Any]]] = []  # (task id, event, fields)
        self._current: tuple[str, StepRef, float] | None = None

    def start(self, ref: StepRef) -> None:
        request = self.task.request
        task_id = str(uuid.uuid4())
        self._current = (task_id, ref, time.monotonic())
        received = {
            "name": ref.task_name,
            "args": display_args(ref),
            "kwargs": "{}",
            "root_id": request.root_id or request.id,
            "parent_id": request.id,
            "retries": 0,
            "eta": None,
            "expires": None,
        }
        self._pending += [(task_id, "task-received", received), (task_id, "task-started", {})]
        self.flush()

    def finished(self, outcome: str, ending: RunEnding | None) -> None:
        """Queue the current step's end; it leaves with the next start or the final flush.

        A step that failed its run is a failed task, as a delivered one is (lg_workers.task_outcomes).
        """
        if self._current is None:
            return
        task_id, _ref, started = self._current
        runtime = time.monotonic() - started
        if ending is not None and ending.failed:
            failure = {"exception": repr(RunFailed(ending.summary)), "traceback": None, "runtime": runtime}
            self._pending.append((task_id, "task-failed", failure))
        else:
            self._pending.append(
                (task_id, "task-succeeded", {"result": repr(task_result(outcome, ending)), "runtime": runtime})
            )
        self._current = None

    def failed(self, error: BaseException) -> None:
        if self._current is not None:
            task_id, ref, _started = self._current
            message = f"{type(error).__name__} in step {ref.key} of run {ref.run_id}"  # ids only, no content
            self._pending.append((task_id, "task-failed", {"exception": message, "traceback": None}))
            self._current = None
        self.flush()

    def flush(self) -> None:
        if self._pending:
            pending, self._pending = self._pending, []
            _sender(self.task.app, self.task.request.hostname).put(pending)


class _TaskEvents:
    """A dispatcher of task events on its own connection, each batch of events sent as one message."""

    def __init__(self, app: Any, hostname: str | None) -> None:
        self.connection = app.connection_for_write()
        self.dispatcher = app.events.Dispatcher(
            connection=self.connection,
            hostname=hostname,
            buffer_group=["task"],
            buffer_limit=8,
            buffer_while_offline=False,
        )
        self.broken = False

    def send(self, events: list[tuple[str, str, dict[str, Any]]]) -> None:
        """Send ``events`` in one message; on failure mark this connection broken (see _Sender)."""
        try:
            for task_id, event, fields in events:
                self.dispatcher.send(event, uuid=task_id, **fields)
            self.dispatcher.flush(errors=False)
        except Exception as exc:  # noqa: BLE001 - see Announcer
            log.debug("task events not sent: %r", exc)
            self.broken = True  # e.g. Redis restarted: this connection stays dead
            try:
                self.connection.release()
            except Exception:  # noqa: BLE001 - closing a dead connection may fail too
                pass


# How long the sender gathers task events after a send before it sends again. Flower
# refreshes in seconds, so 50 ms is invisible there, and it turns a message (and a
# wake-up of the sender thread) per inline step into one per 50 ms for the whole process:
# sending once per step cost a chain about 0.4 ms per step (bench/FINDINGS.md).
TASK_EVENTS_LINGER = 0.05


class _Sender:
    """This process's thread sending queued task events, several steps' batches in one message.

    It owns its dispatcher and opens a new one after a failed send (Redis
    restarted); a batch that cannot be sent, even because Redis cannot be
    reached to open one, is dropped, so the queue never grows. A daemon thread:
    it must not hold a worker's exit; ``drain`` gives it a moment at shutdown.

    Sends are at least ``linger`` seconds apart: events queued meanwhile wait and
    leave together. Each send costs the process's CPU (kombu builds and
    publishes a message) and wakes this thread while the steps' threads want
    the GIL, so one send per step was a measurable share of a worker's time
    (bench/FINDINGS.md). ``drain`` ends a linger at once.
    """

    def __init__(self, app: Any, hostname: str | None, linger: float = TASK_EVENTS_LINGER) -> None:
        self.app, self.hostname, self.linger = app, hostname, linger
        self.events: _TaskEvents | None = None  # only the sender thread uses it
        self._queue: list[tuple[str, str, dict[str, Any]]] = []
        self._busy = False
        self._ready = threading.Condition()
        self._hurry = threading.Event()  # set by drain: stop lingering
        self._last_send = time.monotonic() - linger
        threading.Thread(target=self._run, name="lg-task-events", daemon=True).start()

    def put(self, events: list[tuple[str, str, dict[str, Any]]]) -> None:
        with self._ready:
            idle = not self._queue  # a sender with queued events is lingering or sending: no need to wake it
            self._queue += events
            if idle:
                self._ready.notify_all()

    def drain(self, timeout: float) -> bool:
        """Wait until everything queued is sent (True) or ``timeout`` seconds passed (False)."""
        self._hurry.set()
        try:
            with self._ready:
                return self._ready.wait_for(lambda: not self._queue and not self._busy, timeout)
        finally:
            self._hurry.clear()

    def _run(self) -> None:
        while True:
            with self._ready:
                self._ready.wait_for(lambda: self._queue)
            self._hurry.wait(max(0.0, self._last_send + self.linger - time.monotonic()))  # at once when due
            with self._ready:
                batch, self._queue, self._busy = self._queue, [], True
            try:
                self._send(batch)
            finally:
                self._last_send = time.monotonic()
                with self._ready:
                    self._busy = False
                    self._ready.notify_all()

    def _send(self, batch: list[tuple[str, str, dict[str, Any]]]) -> None:
        try:
            if self.events is None or self.events.broken:
                self.events = _TaskEvents(self.app, self.hostname)
        except Exception as exc:  # noqa: BLE001 - no dispatcher now (Redis down): drop the batch, try at the next
            log.debug("task events not sent: %r", exc)
            return
        self.events.send(batch)


_senders: dict[tuple[int, str | None], _Sender] = {}
_senders_lock = threading.Lock()


def _sender(app: Any, hostname: str | None) -> _Sender:
    key = (os.getpid(), hostname)  # neither threads nor connections survive a fork: a prefork child starts its own
    with _senders_lock:
        found = _senders.get(key)
        if found is None:
            found = _senders[key] = _Sender(app, hostname)
        return found


def drain_task_events(timeout: float = 2.0) -> None:
    """Send what this process's inline steps queued for Flower (at worker shutdown, lg_workers.worker_runtime)."""
    for (pid, _hostname), sender in list(_senders.items()):
        if pid == os.getpid():
            sender.drain(timeout)


__all__ = [
    "MAX_CHAIN_SECONDS",
    "MAX_CHAIN_STEPS",
    "Announcer",
    "Chain",
    "consumed_queues",
    "drain_task_events",
    "shutting_down",
]
