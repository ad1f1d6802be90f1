"""Ending, in Flower, the rows of the step tasks a dead worker held.

A worker killed outright (SIGKILL, a lost host) sends no more task events, so
every task it had started stays STARTED in Flower for as long as Flower runs,
with a Terminate button, while the step itself was taken over long ago: the
lease sweeper re-sends a dead holder's steps, and another worker runs them as
new tasks. Celery reports a killed prefork child's task as failed with
``WorkerLostError``; nothing reports a whole worker's.

The scheduler does: it listens to the task events workers send (the stream
Flower reads) and remembers which started step task, by run and step (the
display arguments, lg_workers.task_display), ran on which worker. When the
sweeper re-sends a step whose holder is gone, the task that held it is
reported failed with ``WorkerLostError``, under its worker's name, so Flower
ends its row and counts it as failed: a lost task is a failed task, as Celery
itself says of a killed child's.

Bounded: at most ``max_tracked`` started tasks are remembered (the oldest is
forgotten first), and a finished task is forgotten at once. Monitoring only: a
broker that cannot be reached stops nothing; the listener reconnects. A task
started while no scheduler listened is not known, and its row stays.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from lg_core.store import StepRecord
from lg_workers.task_display import parse_display

log = logging.getLogger("lg_scheduler.lost_tasks")

MAX_TRACKED = 100_000
RECONNECT_SECONDS = 2.0
_FINISHED = ("task-succeeded", "task-failed", "task-revoked", "task-rejected", "task-retried")


@dataclass(frozen=True, slots=True)
class StartedTask:
    uuid: str
    run_id: str
    step_key: str
    worker: str  # the Celery worker's name, ``lg-model@host``


class LostTasks:
    """The started step tasks workers announced, and the report of those a dead worker held."""

    def __init__(self, app: Any, *, max_tracked: int = MAX_TRACKED) -> None:
        self.app = app
        self.max_tracked = max_tracked
        self._received: OrderedDict[str, tuple[str, str]] = OrderedDict()  # uuid -> (run id, step key)
        self._started: OrderedDict[str, StartedTask] = OrderedDict()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._receiver: Any = None
        self._thread: threading.Thread | None = None

    # -- listening ---------------------------------------------------------------------

    def start(self) -> None:
        """Listen to task events on a daemon thread until :meth:`stop`."""
        self._thread = threading.Thread(target=self._listen, name="lg-lost-tasks", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        receiver = self._receiver
        if receiver is not None:
            receiver.should_stop = True
        if self._thread is not None:
            self._thread.join(timeout)

    def _listen(self) -> None:
        while not self._stop.is_set():
            try:
                with self.app.connection_for_read() as connection:
                    self._receiver = self.app.events.Receiver(connection, handlers={"*": self.on_event})
                    self._receiver.capture(limit=None, timeout=None, wakeup=False)
            except Exception as exc:  # noqa: BLE001 - monitoring: reconnect, never stop the scheduler
                log.debug("task events unavailable (%r); listening again in %.0f s", exc, RECONNECT_SECONDS)
            self._stop.wait(RECONNECT_SECONDS)

    def on_event(self, event: dict[str, Any]) -> None:
        """Track one task event: a step task's receipt (its run and step) and start (its worker), its end."""
        kind, uuid = event.get("type"), event.get("uuid")
        if not isinstance(uuid, str):
            return
        with self._lock:
            if kind == "task-received":
                step = parse_display(event.get("args"))
                if step is not None:
                    self._remember(self._received, uuid, step)
            elif kind == "task-started":
                step = self._received.pop(uuid, None)
                if step is not None:
                    self._remember(self._started, uuid, StartedTask(uuid, *step, str(event.get("hostname") or "")))
            elif kind in _FINISHED:
                self._received.pop(uuid, None)
                self._started.pop(uuid, None)

    def _remember(self, table: OrderedDict[str, Any], uuid: str, value: Any) -> None:
        table[uuid] = value
        while len(table) > self.max_tracked:
            table.popitem(last=False)

    # -- reporting ---------------------------------------------------------------------

    def held(self, steps: Iterable[StepRecord]) -> list[StartedTask]:
        """The started tasks of ``steps``, forgotten here: the ones to report lost."""
        wanted = {(step.run_id, step.key) for step in steps}
        with self._lock:
            found = [task for task in self._started.values() if (task.run_id, task.step_key) in wanted]
            for task in found:
                del self._started[task.uuid]
        return found

    def report_lost(self, steps: Iterable[StepRecord]) -> int:
        """Report the tasks that held ``steps`` (whose holders are gone) as failed; returns how many."""
        tasks = self.held(steps)
        if not tasks:
            return 0
        try:
            with self.app.connection_for_write() as connection:
                for task in tasks:
                    self._send_failed(connection, task)
        except Exception as exc:  # noqa: BLE001 - monitoring only: the steps were re-sent all the same
            log.debug("could not report %d lost tasks: %r", len(tasks), exc)
        return len(tasks)

    def _send_failed(self, connection: Any, task: StartedTask) -> None:
        why = (
            f"WorkerLostError('worker {task.worker} is gone; step {task.step_key} of run {task.run_id} "
            "was sent again to another worker')"
        )
        # Under the dead worker's name: Flower keeps the row on the worker that held it. Flower counts the
        # event as a sign of life too, so the dead worker reads as online for one heartbeat window (seconds).
        dispatcher = self.app.events.Dispatcher(connection, hostname=task.worker, enabled=True)
        try:
            dispatcher.send("task-failed", uuid=task.uuid, exception=why, traceback=None)
        finally:
            dispatcher.close()
        log.info(
            "reported task %s of the dead worker %s lost (step %s of run %s)",
            task.uuid,
            task.worker,
            task.step_key,
            task.run_id,
        )


__all__ = ["MAX_TRACKED", "LostTasks", "StartedTask"]
