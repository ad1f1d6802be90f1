"""A bare Celery app: lg_workers' broker settings and one no-op task, nothing of LittleGhost.

    celery -A distbench.bare_app worker -Q bench.bare --pool prefork --concurrency 2 ...

bench/startup.py starts it as the floor of a worker's start time and memory.
The floor app (``floor_app``) cannot serve there: it builds its settings with
``lg_workers.app_factory.celery_settings``, so its worker imports lg_core, whose
import is one of the costs being measured. This module therefore spells the
same settings out and imports only Celery; :func:`check_settings` (called by
the benchmark before it starts anything) fails when they no longer match
``celery_settings``.
"""

from __future__ import annotations

import os
from typing import Any

from celery import Celery

QUEUE = "bench.bare"
TASK = "bench.noop"


def settings(broker_url: str) -> dict[str, Any]:
    """``celery_settings`` of a configuration with ``broker_url``, without LittleGhost's task modules and routes."""
    return {
        "broker_url": broker_url,
        "broker_connection_retry_on_startup": True,
        "broker_transport_options": {"visibility_timeout": 6 * 3600},
        "task_acks_late": True,
        "task_reject_on_worker_lost": True,
        "worker_prefetch_multiplier": 1,
        "task_ignore_result": True,
        "task_track_started": True,
        "task_send_sent_event": True,
        "worker_send_task_events": True,
        "task_serializer": "json",
        "accept_content": ["json"],
        "task_default_queue": QUEUE,
        "task_create_missing_queues": True,
        "worker_hijack_root_logger": False,
        "worker_redirect_stdouts": False,
        "imports": [],
    }


# Differ on purpose: LittleGhost's task modules, routes and default queue are not part of a bare worker.
_OWN = ("imports", "task_routes", "task_default_queue")


def check_settings(broker_url: str) -> None:
    """Raise when :func:`settings` and lg_workers' ``celery_settings`` disagree beyond ``_OWN``."""
    from lg_core import Configuration
    from lg_workers.app_factory import celery_settings

    expected = {k: v for k, v in celery_settings(Configuration(broker_url=broker_url)).items() if k not in _OWN}
    mine = {k: v for k, v in settings(broker_url).items() if k not in _OWN}
    if mine != expected:
        raise RuntimeError(f"distbench.bare_app's settings drifted from celery_settings: {mine} != {expected}")


app = Celery("lg-bench-bare", set_as_current=False)
app.conf.update(settings(os.environ.get("LG_BROKER_URL", "redis://127.0.0.1:6379/0")))


@app.task(name=TASK)
def noop() -> None:
    """Never sent by the benchmark: a worker with one task, like any real app's."""
