"""Building the Celery app from a LittleGhost Configuration.

The settings follow from the durable step protocol: a message is
acknowledged only after its step committed (``acks_late``), a killed pool child
puts its message back at once (``reject_on_worker_lost``), a worker takes one
message at a time per process slot (``prefetch_multiplier=1``), Redis waits far
longer than any step before redelivering on its own (the sweeper, not the
visibility timeout, recovers a dead worker), and task events are on for Flower.
Task arguments are ids only, serialized as JSON.
"""

from __future__ import annotations

from typing import Any

from celery import Celery

from lg_core.config import Configuration
from lg_core.errors import ConfigurationError
from lg_workers.queues import QUEUES, TASK_QUEUES

VISIBILITY_TIMEOUT = 6 * 3600


def celery_settings(configuration: Configuration) -> dict[str, Any]:
    if not configuration.broker_url:
        raise ConfigurationError("lg_workers needs broker_url (or LG_BROKER_URL), e.g. redis://127.0.0.1:6379/0")
    return {
        "broker_url": configuration.broker_url,
        "broker_connection_retry_on_startup": True,
        "broker_transport_options": {"visibility_timeout": VISIBILITY_TIMEOUT},
        "task_acks_late": True,
        "task_reject_on_worker_lost": True,
        "worker_prefetch_multiplier": 1,
        "task_ignore_result": True,
        "task_track_started": True,
        "task_send_sent_event": True,
        "worker_send_task_events": True,
        "task_serializer": "json",
        "accept_content": ["json"],
        "task_default_queue": QUEUES[0],
        "task_routes": {name: {"queue": queue} for name, queue in TASK_QUEUES.items()},
        "task_create_missing_queues": True,
        "worker_hijack_root_logger": False,
        "worker_redirect_stdouts": False,
        "imports": ["lg_workers.tasks", *configuration.imports],
    }


def create_app(configuration: Configuration) -> Celery:
    app = Celery("littleghost", set_as_current=False)
    app.conf.update(celery_settings(configuration))
    return app


__all__ = ["VISIBILITY_TIMEOUT", "celery_settings", "create_app"]
