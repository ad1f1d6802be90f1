"""CeleryBackend: ``start_execution`` on Celery workers.

Installed as the ``celery`` entry point of ``littleghost.backends``; the
lg_core Runtime loads it when ``broker_url`` is configured, so lg_core never
imports Celery or Redis itself (CONVENTIONS: dependency direction).
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

import redis

from lg_core.engine.dispatcher import StepRef
from lg_workers.celery_app import create_app
from lg_workers.queues import queue_for
from lg_workers.streams import RedisEventSink, RedisLiveSource

if TYPE_CHECKING:
    from lg_core.run import Run
    from lg_core.services import Runtime


class CeleryBackend:
    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.app = create_app(runtime.configuration)
        self.redis = redis.Redis.from_url(runtime.configuration.broker_url, health_check_interval=30)
        runtime.engine.add_sink(RedisEventSink(self.redis))

    def start(self, run: Run) -> None:
        """Persist the run, then hand its first step to the workers."""
        refs = self.runtime.begin(run, distributed=True)
        self.publish(refs)
        if run._on_event is not None:
            self._follow(run)

    def publish(self, refs: list[StepRef]) -> None:
        """Send one task per step; the arguments are ids only (no prompt or user data)."""
        for ref in refs:
            self.app.send_task(ref.task_name, args=[ref.run_id, ref.key], queue=queue_for(ref.task_name))

    def advance(self, run_id: str) -> None:
        self.app.send_task("lg.advance", args=[run_id], queue=queue_for("lg.advance"))

    def live_source(self, run_id: str) -> RedisLiveSource:
        return RedisLiveSource(self.redis, run_id)

    def wait_local(self, run_id: str, timeout: float | None) -> bool:
        return False

    def _follow(self, run: Run) -> None:
        """Deliver the run's events to its ``on_event`` callback from a reader thread."""
        from lg_core.execution import Execution

        execution = Execution(run.id, self.runtime, self)
        callback: Any = run._on_event

        def follow() -> None:
            for event in execution.events():
                callback(event)

        threading.Thread(target=follow, name=f"lg-follow-{run.id[:8]}", daemon=True).start()

    def shutdown(self) -> None:
        self.redis.close()


__all__ = ["CeleryBackend"]
