"""A sandbox worker also consumes a queue named for its own process: code-mode programs live there.

A code-mode program that outlives its ``exec`` is a child of the worker process
that ran the ``exec`` (lg_core.code_mode.active_sessions), and only that
process can observe or stop it. The step that left it running records the
process (its lease-holder string), and the ``wait`` or ``stop`` after it is
sent to ``lg.sandbox.<holder>`` (lg_core.engine._code_exec), which this module
makes the worker consume once Celery has applied ``-Q``. Only a worker whose
tasks run in its own process (threads or solo pool) gets one: a prefork task
runs in one of several children, which no queue can name, so there a ``wait``
may reach another process and report the program ``terminated``. While the
process holds programs its heartbeat renews a holder lease in the run store
(lg_core.store._holder_leases): when the process dies, the lease runs out, and
the scheduler, on whatever host, sends a ``wait`` left in this queue to plain
``lg.sandbox`` instead, where it reports the program ``terminated``.

A run's end is committed by whichever worker takes its last step, usually not
the one holding its program, so a sandbox worker also reaps: every
REAP_SECONDS it asks the run store about the runs whose programs it holds and
closes the sessions of those that ended (a program the model left running
would otherwise live out its ``wall_seconds``).
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from celery.signals import celeryd_after_setup

from lg_core.code_mode.active_sessions import ACTIVE_SESSIONS, home_queue
from lg_core.lease_holders import current_holder
from lg_workers.queues import SANDBOX

IN_PROCESS_POOLS = ("celery.concurrency.thread", "celery.concurrency.solo")
REAP_SECONDS = 5.0
log = logging.getLogger("lg_workers.program_home")


def _consume_own_queue(sender: Any = None, instance: Any = None, **_signal: Any) -> None:
    """``celeryd_after_setup`` handler: add this process's own sandbox queue to what it consumes."""
    if instance is None:
        return
    queues = instance.app.amqp.queues
    if SANDBOX not in (queues.consume_from or {}):
        return
    if getattr(instance.pool_cls, "__module__", "") not in IN_PROCESS_POOLS:
        return
    queues.select_add(home_queue(SANDBOX, current_holder()))
    threading.Thread(target=_reap_forever, name="lg-code-reaper", daemon=True).start()


def reap_ended_runs(store: Any) -> int:
    """Close the code-mode sessions of runs that ended elsewhere; how many runs' sessions were closed."""
    closed = 0
    for run_id in ACTIVE_SESSIONS.run_ids():
        try:
            ended = store.load_run(run_id).finished
        except Exception:  # noqa: BLE001 - the store is out of reach: ask again next time
            log.debug("could not read run %s to reap its code-mode session", run_id, exc_info=True)
            continue
        if ended:
            try:
                ACTIVE_SESSIONS.close_run(run_id)
            except Exception:  # noqa: BLE001 - logged: the run is over either way
                log.exception("a code-mode program of run %s did not clean up", run_id)
            closed += 1
    return closed


def _reap_forever() -> None:
    from lg_workers.worker_runtime import worker_runtime

    stop = threading.Event()
    while not stop.wait(REAP_SECONDS):
        if ACTIVE_SESSIONS.run_ids():
            reap_ended_runs(worker_runtime().store)


def install() -> None:
    """Make the sandbox workers this process starts consume their own queue (idempotent)."""
    celeryd_after_setup.connect(_consume_own_queue, weak=False, dispatch_uid="lg-program-home")


__all__ = ["REAP_SECONDS", "install", "reap_ended_runs"]
