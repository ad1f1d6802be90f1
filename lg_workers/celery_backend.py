"""CeleryBackend: ``start_execution`` on Celery workers.

Installed as the ``celery`` entry point of ``littleghost.backends``; the
lg_core Runtime loads it when ``broker_url`` is configured, so lg_core never
imports Celery or Redis itself (dependencies point
``lg_scheduler -> lg_workers -> lg_core``, never back).
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Any

import kombu.exceptions
import redis

from lg_core.engine.dispatcher import StepRef
from lg_core.errors import ConfigurationError
from lg_core.rate_limit import RedisLimiter
from lg_workers.app_factory import create_app
from lg_workers.broker_check import check_broker
from lg_workers.child_starts import keep_for_chain
from lg_workers.queues import queue_for
from lg_workers.streams import RedisEventSink, RedisLiveSource, connect
from lg_workers.task_display import display_args

log = logging.getLogger("lg_workers.celery_backend")

# What a failed pipeline raises: redis-py's own errors (the batch is flushed
# outside Celery's error translation), kombu's translation of them, or kombu's
# BatchPublishError when a pooled connection dies while the batch is flushed.
PUBLISH_ERRORS = (
    redis.ConnectionError,
    redis.TimeoutError,
    kombu.exceptions.OperationalError,
    kombu.exceptions.BatchPublishError,
)

if TYPE_CHECKING:
    from lg_core.run import Run
    from lg_core.runtime import Runtime


def check_shared_store(store: Any) -> None:
    """Refuse to hand a run to the workers when they cannot read it.

    LG_BROKER_URL set but LG_RUN_STORE forgotten leaves the default in-memory
    store: the run was stored there and enqueued, every worker that took its
    step found no such run and dropped it, and it stayed 'running' forever with
    nothing in any log. Refused before the run exists, with how to fix it.
    """
    if store.in_memory:
        raise ConfigurationError(
            "broker_url is set but run_store is the default in-memory SQLite store, private to this "
            "process, so no worker could read the run; set run_store (LG_RUN_STORE, run_store in lg.yaml "
            "or configure(run_store=...)) to the store the workers use, e.g. "
            "postgresql+psycopg://USER@HOST/DB (`. .lg/stack/env` after `lg stack up`), "
            "or unset broker_url to run executions on threads here"
        )


class CeleryBackend:
    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.app = create_app(runtime.configuration)
        url = str(runtime.configuration.broker_url)  # create_app refused a missing one
        self.redis = connect(url)
        self.url = url
        self.events = RedisEventSink(self.redis)
        runtime.engine.add_sink(self.events)
        self.rate_limiter = RedisLimiter(self.redis, errors=(redis.RedisError,))
        self._followers: dict[str, threading.Thread] = {}
        self._lock = threading.Lock()

    def start(self, run: Run) -> None:
        """Persist the run, then hand its first step to the workers.

        The first step is in the run store's outbox once ``begin`` returns, so a
        broker that cannot be reached now does not fail the call: raising would
        tell the caller the run did not start, and a retry would start a second
        one. The scheduler's relay sends the step once the broker is back.
        """
        check_shared_store(self.runtime.store)
        refs = self.runtime.begin(run, distributed=True)
        try:
            # A child run started by a step on this worker: its first step runs next on this thread.
            self.publish(keep_for_chain(refs))
        except PUBLISH_ERRORS as exc:
            log.warning(
                "run %s is stored but the broker is unreachable (%s); `lg scheduler` sends its first step "
                "once the broker is back",
                run.id,
                exc,
            )
        if run._on_event is not None or run._closers:
            # Workers close their own copies of the run's resources; the ones a hook
            # registered here close when the run ends (spec Run: after every outcome).
            self._follow(run)

    def publish(self, refs: list[StepRef]) -> None:
        """Send one task per step; the arguments are ids only (no prompt or user data).

        The messages and their ``task-sent`` events go out in one Redis pipeline
        (kombu's publish batch): unbatched, kombu builds a Redis client and makes a
        round trip for each of them. If the pipeline fails, every task is sent
        again the ordinary way, with Celery's publish retries; a duplicate task is
        harmless (its claim finds the step taken or done).

        The events this process queued go first (RedisEventSink.deferring): the
        steps sent here may run elsewhere, and their events must follow these.
        """
        if not refs:
            return
        self.events.flush()
        try:
            with self.app.producer_or_acquire() as producer, producer.batch():
                for ref in refs:
                    self._send(ref, producer)
        except PUBLISH_ERRORS:
            for ref in refs:
                self._send(ref)

    def _send(self, ref: StepRef, producer: Any = None) -> None:
        self.app.send_task(
            ref.task_name,
            args=[ref.run_id, ref.key],
            argsrepr=display_args(ref),  # what Flower shows: run, step and tool (lg_workers.task_display)
            queue=ref.queue or queue_for(ref.task_name),  # a step's own route (StepKind.route) first
            producer=producer,
        )

    def check_reachable(self) -> None:
        """ConfigurationError unless the broker answers: a run handed over now would otherwise
        sit with nobody to run it until a scheduler's relay re-sent its steps."""
        check_broker(self.url)

    def advance(self, run_id: str) -> None:
        self.app.send_task("lg.advance", args=[run_id], queue=queue_for("lg.advance"))

    def executes_here(self, run_id: str) -> bool:
        """True while a thread here follows the run (workers execute it): the live Run gets
        its outcome from that thread, and the Execution is not finished until it closed the run."""
        with self._lock:
            return run_id in self._followers

    def live_source(self, run_id: str) -> RedisLiveSource:
        return RedisLiveSource(self.redis, run_id, self.url)

    def wait_local(self, run_id: str, timeout: float | None) -> bool:
        """Join the thread delivering this run's events to ``on_event``; False when there is none."""
        with self._lock:
            follower = self._followers.get(run_id)
        if follower is None:
            return False
        follower.join(timeout)
        if follower.is_alive():
            from lg_core.errors import DeadlineExceededError

            raise DeadlineExceededError(f"run {run_id} is still running after {timeout} s; it keeps going")
        return True

    def _follow(self, run: Run) -> None:
        """Deliver the run's events to its ``on_event`` callback from a reader thread, and
        close the run here (its registered resources) once it has ended.

        ``run.deliver`` calls the consumer serially; if it raises, the run is
        cancelled (in the store, for the workers), the thread follows it to its
        end, and ``Execution.wait`` re-raises the error (the spec's event-delivery
        failure). ``wait`` joins this thread, so the consumer has seen every event
        when it returns.
        """
        from lg_core.execution import Execution

        execution = Execution(run.id, self.runtime, self)

        def follow() -> None:
            cancelled = False
            try:
                for event in execution.events():
                    run.deliver(event)  # after a consumer failure it only records the outcome
                    if run._delivery_error is not None and not cancelled:
                        self.runtime.cancel(run.id)
                        cancelled = True
            except Exception as exc:  # noqa: BLE001 - surfaced by wait(), like a consumer failure
                run._delivery_error = run._delivery_error or exc
            finally:
                run._phase = "finished"
                try:
                    run.close()
                except Exception as exc:  # noqa: BLE001 - a cleanup failure, surfaced by wait()
                    run._delivery_error = run._delivery_error or exc
                with self._lock:
                    self._followers.pop(run.id, None)

        thread = threading.Thread(target=follow, name=f"lg-follow-{run.id[:8]}", daemon=True)
        with self._lock:
            self._followers[run.id] = thread
        thread.start()

    def shutdown(self) -> None:
        self.redis.close()


__all__ = ["CeleryBackend", "check_shared_store"]
