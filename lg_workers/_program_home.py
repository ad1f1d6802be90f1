"""A sandbox worker also consumes a queue named for its own process: code-mode programs live there.

A code-mode program that outlives its ``exec`` is a child of the worker process
that ran the ``exec`` (lg_core.code_mode.active_sessions), and only that
process can observe or stop it. The step that left it running records the
process (its lease-holder string), and the ``wait`` or ``stop`` after it is
sent to ``lg.sandbox.<holder>`` (lg_core.engine._code_exec), which this module
makes the worker consume once Celery has applied ``-Q``. Only a worker whose
tasks run in its own process (threads or solo pool) gets one: a prefork task
runs in one of several children, which no queue can name, so there a ``wait``
may reach another process and report the program ``terminated``.
"""

from __future__ import annotations

from typing import Any

from celery.signals import celeryd_after_setup

from lg_core.code_mode.active_sessions import home_queue
from lg_core.lease_holders import current_holder
from lg_workers.queues import SANDBOX

IN_PROCESS_POOLS = ("celery.concurrency.thread", "celery.concurrency.solo")


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


def install() -> None:
    """Make the sandbox workers this process starts consume their own queue (idempotent)."""
    celeryd_after_setup.connect(_consume_own_queue, weak=False, dispatch_uid="lg-program-home")


__all__ = ["install"]
