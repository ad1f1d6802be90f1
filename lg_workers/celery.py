"""The Celery app for the ``celery`` command line and for workers.

    celery -A lg_workers flower
    celery -A lg_workers worker -Q lg.model --pool threads   (``lg worker`` does this for you)

It reads the same settings as every other process: ``LG_BROKER_URL``,
``LG_RUN_STORE``, ``LG_IMPORTS`` or the YAML config file. Creating it connects
to nothing; Celery connects when a worker starts or a task is sent. A worker
started from it running as root prints one line instead of Celery's root
warning (:mod:`lg_workers._root_notice`); one serving ``lg.sandbox`` in a threads
pool also consumes the queue named for its own process (:mod:`lg_workers._program_home`).
"""

from __future__ import annotations

from lg_core.config import current_configuration
from lg_workers import _program_home, _root_notice
from lg_workers.app_factory import create_app

app = create_app(current_configuration())
_root_notice.install()
_program_home.install()

__all__ = ["app"]
