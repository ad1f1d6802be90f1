"""A Celery app whose beat sends ``lg.recover`` every second (see lg_scheduler.tasks).

    celery -A lg_scheduler.beat beat
    celery -A lg_scheduler.beat worker -Q lg.orchestrate     (or lg worker with --import lg_scheduler.tasks)

It reads the same settings as every other process (``LG_BROKER_URL``,
``LG_RUN_STORE``, ``LG_IMPORTS`` or the YAML config file); creating it connects
to nothing. For another interval build your own: ``install(create_app(current_configuration()), 0.5)``.
"""

from __future__ import annotations

from lg_core.config import current_configuration
from lg_scheduler.tasks import install
from lg_workers.app_factory import create_app

app = install(create_app(current_configuration()))

__all__ = ["app"]
