"""The process ``lg worker`` becomes once its settings are checked: it supervises the Celery workers.

    python -m lg_workers._supervisor LOGLEVEL POOL:CONCURRENCY:QUEUE,QUEUE[@PID] ...

Started by :func:`lg_workers.worker.supervise` with the workers' environment
as its own; ``@PID`` names a worker the command already forked (this process's
child), which is adopted instead of started. It imports only the standard
library and lg_workers.worker (no store, engine, Celery or user modules), so
the supervisor stays small for as long as the workers run.
"""

from __future__ import annotations

import os
import sys

from lg_workers.worker import Inherited, WorkerGroup, run_workers


def main(argv: list[str]) -> int:
    loglevel, *specs = argv
    groups, started = [], []
    for spec in specs:
        group, _, pid = spec.partition("@")
        groups.append(WorkerGroup.from_spec(group))
        started.append(Inherited(int(pid)) if pid else None)
    return run_workers(groups, dict(os.environ), loglevel, started=started)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
