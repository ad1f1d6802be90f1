"""The runtime of a worker process.

Built on first use in each process (and rebuilt after a fork, because a
prefork child must not share its parent's database connections or Redis
sockets) from the process configuration (environment / config file).
"""

from __future__ import annotations

import os
import threading
from typing import Any

from lg_core.config import current_configuration
from lg_workers.continuation import drain_task_events

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
            config = current_configuration()
            if _runtime is not None:
                config._runtime = None  # inherited across fork: build our own
            runtime = config.runtime()
            runtime.backend  # noqa: B018 - attaches the Redis event sink before the first step runs
            _runtime = (pid, runtime)
        return _runtime[1]


def close_worker_runtime(**_signal: Any) -> None:
    """Close this process's runtime as the worker (or its pool child) shuts down.

    Connected to Celery's ``worker_process_shutdown`` and ``worker_shutdown``:
    the task events of the steps a task ran itself are sent first; the runs a
    worker rebuilt keep the resources their ``prepare_run`` hooks registered
    until then, and the heartbeat must stop before the store closes.
    """
    global _runtime
    drain_task_events()  # the last inline steps' Flower events, while Redis is still in use
    with _lock:
        current, _runtime = _runtime, None
    if current is not None and current[0] == os.getpid():
        current[1].configuration.close()


def _connect_shutdown_signals() -> None:
    from celery import signals

    signals.worker_process_shutdown.connect(close_worker_runtime, weak=False)
    signals.worker_shutdown.connect(close_worker_runtime, weak=False)


_connect_shutdown_signals()

__all__ = ["close_worker_runtime", "worker_runtime"]
