"""The runtime of a worker process.

Built on first use in each process (and rebuilt after a fork, because a
prefork child must not share its parent's database connections or Redis
sockets) from the process configuration (environment / config file).
"""

from __future__ import annotations

import os
import threading
from typing import Any

from lg_core.config import configuration

_lock = threading.Lock()
_runtime: tuple[int, Any] | None = None


def worker_runtime() -> Any:
    global _runtime
    pid = os.getpid()
    current = _runtime
    if current is not None and current[0] == pid:
        return current[1]
    with _lock:
        if _runtime is None or _runtime[0] != pid:
            config = configuration()
            if _runtime is not None:
                config._runtime = None  # inherited across fork: build our own
            runtime = config.runtime()
            runtime.backend  # noqa: B018 - attaches the Redis event sink before the first step runs
            _runtime = (pid, runtime)
        return _runtime[1]


def close_worker_runtime(**_signal: Any) -> None:
    """Close this process's runtime as the worker (or its pool child) shuts down.

    Connected to Celery's ``worker_process_shutdown`` and ``worker_shutdown``:
    the runs a worker rebuilt keep the resources their ``prepare_run`` hooks
    registered until then, and the heartbeat must stop before the store closes.
    """
    global _runtime
    with _lock:
        current, _runtime = _runtime, None
    if current is not None and current[0] == os.getpid():
        current[1].configuration.close()


_on_thread_pool = False


def hands_off_publishing() -> bool:
    """May a step task here return before its successors are published (lg_workers.tasks.run_step)?

    Only on a threads pool. There a task thread cannot die alone: whatever
    kills it kills the process, whose unacknowledged message would not come
    back before the broker's visibility timeout anyway, so acknowledging
    before the publish loses nothing; the scheduler's relay sends the
    committed successors in both cases. A prefork child can die alone, and
    its unacknowledged message then comes back at once
    (``task_reject_on_worker_lost``) to re-announce the successors: its tasks
    keep publishing before they return.
    """
    return _on_thread_pool


def _note_pool(sender: Any = None, **_signal: Any) -> None:
    """Remember the pool this worker process runs its tasks on (Celery's ``worker_init``)."""
    from celery.concurrency import get_implementation
    from celery.concurrency.thread import TaskPool as ThreadsPool

    global _on_thread_pool
    pool = get_implementation(getattr(sender, "pool_cls", None) or "prefork")
    _on_thread_pool = isinstance(pool, type) and issubclass(pool, ThreadsPool)


def _connect_worker_signals() -> None:
    from celery import signals

    signals.worker_init.connect(_note_pool, weak=False)
    signals.worker_process_shutdown.connect(close_worker_runtime, weak=False)
    signals.worker_shutdown.connect(close_worker_runtime, weak=False)


_connect_worker_signals()

__all__ = ["close_worker_runtime", "hands_off_publishing", "worker_runtime"]
