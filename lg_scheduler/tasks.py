"""``lg.recover``: the recovery sweeps as a Celery task, for fleets driven by Celery beat.

Instead of running ``lg scheduler``, a deployment may let Celery beat send
``lg.recover`` every second to the ``lg.orchestrate`` queue; any orchestrate
worker that imports this module (``--import lg_scheduler.tasks`` or
``LG_IMPORTS=lg_scheduler.tasks``) runs one :meth:`Scheduler.run_once` pass.

    celery -A lg_scheduler.beat beat                      # sends lg.recover every second
    lg worker --queues lg.orchestrate --import lg_scheduler.tasks

Several passes at once (two beats, overlapping tasks) are harmless: every
sweep's writes are conditional. Each message expires after a few intervals,
so a backlog of recover tasks never piles up behind a stopped worker.
"""

from __future__ import annotations

import math
from typing import Any

from celery import Celery, shared_task

from lg_core.errors import ConfigurationError
from lg_scheduler.scheduler import Scheduler
from lg_workers.queues import ORCHESTRATE
from lg_workers.worker_runtime import worker_runtime

RECOVER_TASK = "lg.recover"

_scheduler: Scheduler | None = None


@shared_task(name=RECOVER_TASK)
def recover() -> dict[str, int]:
    """One pass of every recovery sweep in this worker's runtime; returns the counts."""
    return _worker_scheduler().run_once()


def _worker_scheduler() -> Scheduler:
    """This worker's Scheduler, kept from pass to pass: it knows when its next run_retention
    pass is due, so a beat sending lg.recover every second still prunes once an hour."""
    global _scheduler
    runtime = worker_runtime()
    scheduler = _scheduler
    if scheduler is None or scheduler.runtime is not runtime:
        scheduler = _scheduler = Scheduler(runtime)
    return scheduler


def beat_schedule(interval: float = 1.0) -> dict[str, dict[str, Any]]:
    """The ``beat_schedule`` entry that sends ``lg.recover`` every ``interval`` seconds."""
    if (
        isinstance(interval, bool)
        or not isinstance(interval, (int, float))
        or not math.isfinite(interval)
        or interval <= 0
    ):
        raise ConfigurationError(f"the recovery interval must be a positive number of seconds, got {interval!r}")
    return {
        "lg-recover": {
            "task": RECOVER_TASK,
            "schedule": float(interval),
            "options": {"queue": ORCHESTRATE, "expires": max(5.0, 5 * float(interval))},
        }
    }


def install(app: Celery, interval: float = 1.0) -> Celery:
    """Route ``lg.recover`` to lg.orchestrate, import it in workers and add its beat entry."""
    schedule = beat_schedule(interval)
    app.conf.beat_schedule = {**(app.conf.beat_schedule or {}), **schedule}
    app.conf.task_routes = {**(app.conf.task_routes or {}), RECOVER_TASK: {"queue": ORCHESTRATE}}
    imports = tuple(app.conf.imports or ())
    if __name__ not in imports:
        app.conf.imports = (*imports, __name__)
    return app


__all__ = ["RECOVER_TASK", "beat_schedule", "install", "recover"]
