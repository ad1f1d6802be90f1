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


__all__ = ["worker_runtime"]
