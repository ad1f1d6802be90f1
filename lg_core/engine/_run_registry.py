"""The runs this process knows: live runs, rebuilt handles, their eviction, event sinks and hints.

A run executing here (started here, or resumed) is *live*; a run a worker
executes steps of is rebuilt from its record once (``Runtime.restored_run``,
which runs every ``Hook.prepare_run``) and cached between its steps, up to
``run_cache_size``. What this process remembers about runs in flight (a cancel
seen, how many interjections are pending, a successor's input) is a hint whose
absence means "ask the store", kept in bounded ``RecentDict``s: only a run's
final commit here clears them, and tools workers and clients never make one.
The registry also publishes a run's events, to the in-process bus and to every
sink (a Redis stream for other processes).
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from collections import OrderedDict
from typing import Any, Generic

from lg_core.agent_stream import chain_wrappers
from lg_core.engine._agent_stream_links import AgentStreamLinks
from lg_core.engine._event_bus import EventBus
from lg_core.engine._frames import FrameCache
from lg_core.engine._run_protocol import EngineRun, EngineRuntime, RunT
from lg_core.engine.leases import Heartbeat
from lg_core.engine.recent_dict import RecentDict
from lg_core.errors import RunNotFoundError
from lg_core.events import StreamEvent
from lg_core.store import RunRecord, RunStore
from lg_core.store.transient_errors import is_transient

log = logging.getLogger("lg_core.engine")
CANCEL_POLL_SECONDS = 1.0


class RunRegistry(Generic[RunT]):
    def __init__(
        self,
        runtime: EngineRuntime[RunT],
        store: RunStore,
        frames: FrameCache,
        heartbeat: Heartbeat,
        run_cache_size: int,
    ) -> None:
        self.runtime = runtime
        self.store = store
        self.frames = frames
        self.heartbeat = heartbeat
        self.run_cache_size = run_cache_size
        self.bus = EventBus()
        self.sinks: list[Any] = []
        self.agent_stream_links = AgentStreamLinks()
        self.lock = threading.Lock()
        self._live: weakref.WeakValueDictionary[str, RunT] = weakref.WeakValueDictionary()
        self.recent: OrderedDict[str, RunT] = OrderedDict()  # the Run cache, up to run_cache_size
        self._retired: list[RunT] = []  # dropped from the cache while a step used them; closed by close()
        self.cancel_flags: RecentDict[str, bool] = RecentDict(run_cache_size)  # missing: poll the flag
        self.flag_polls: RecentDict[str, float] = RecentDict(run_cache_size)  # missing: poll now
        # run -> interjections pending, as of its last commit here; missing: may be pending
        self.interjections: RecentDict[str, int] = RecentDict(run_cache_size)
        self.step_inputs: RecentDict[tuple[str, str], dict[str, Any] | None] = RecentDict(
            run_cache_size
        )  # missing: load the step
        self.resumed: set[tuple[str, str]] = (
            set()
        )  # steps resume() handed out: their first attempt here is a re-attempt

    def close(self) -> None:
        """Close the resources of every rebuilt run this process still holds (it shuts down)."""
        with self.lock:
            cached, self._retired = [*self.recent.values(), *self._retired], []
            self.recent.clear()
        for run in cached:
            close_rebuilt(run)

    # -- run handles -----------------------------------------------------------------

    def attach(self, run: RunT) -> None:
        self._live[run.id] = run

    def detach(self, run_id: str) -> None:
        with self.lock:
            self._live.pop(run_id, None)

    def live_run(self, run_id: str) -> RunT | None:
        """The Run object executing ``run_id`` in this process, if any."""
        return self._live.get(run_id)

    def run_handle(self, run_id: str, record: RunRecord | None = None) -> RunT | None:
        """The run executing or cached here, else rebuilt from ``record`` (read from the store when None)."""
        run = self._live.get(run_id)
        if run is not None:
            return run
        with self.lock:
            cached = self.recent.get(run_id)
            if cached is not None:
                self.recent.move_to_end(run_id)
                return cached
        if record is None:
            record = self.store.load_run(run_id)
        if record.finished:
            return None
        run = self.runtime.restored_run(record)
        with self.lock:
            self.recent[run_id] = run
            evicted = self._evict_idle(keep=run_id)
        for old in evicted:  # not under the lock: closers are application code and may be slow
            close_rebuilt(old)
        return run

    def has_run(self, run_id: str) -> bool:
        """Does ``run_handle`` have the run without reading it? (A claim then need not read its row.)"""
        return run_id in self._live or run_id in self.recent

    def _evict_idle(self, keep: str) -> list[RunT]:
        """Drop the least recently used cached runs beyond ``run_cache_size`` (under ``lock``).

        A run with a step executing here stays, whatever its age: dropping it
        would close its resources (prepare_run's) under that step. So does
        ``keep``, the run just rebuilt for a step about to execute. The cache
        may so exceed its size while more runs than that are busy at once.
        """
        excess = len(self.recent) - self.run_cache_size
        if excess <= 0:
            return []
        busy = self.heartbeat.executing_runs() | {keep}
        idle = [run_id for run_id in self.recent if run_id not in busy][:excess]
        return [self.recent.pop(run_id) for run_id in idle]

    def forget(self, run_id: str) -> None:
        """Drop every hint about ``run_id`` and its cached handle (closing its resources)."""
        with self.lock:
            self.cancel_flags.pop(run_id, None)
            self.flag_polls.pop(run_id, None)
            self.interjections.pop(run_id, None)
            cached = self.recent.pop(run_id, None)
            self.step_inputs.discard_where(lambda key: key[0] == run_id)
        self.frames.forget_run(run_id)
        if cached is not None:
            close_rebuilt(cached)

    # -- events ----------------------------------------------------------------------

    def add_sink(self, sink: Any) -> None:
        """Also publish every event to ``sink`` (e.g. a Redis Stream for other processes)."""
        self.sinks.append(sink)

    def publish(self, run_id: str, event: StreamEvent) -> None:
        self._forward_to_parents(run_id, [event])
        self.bus.publish(run_id, event)
        for sink in self.sinks:
            sink.publish(run_id, event)

    def publish_many(self, run_id: str, events: list[StreamEvent]) -> None:
        """Publish a commit's events in order, each sink taking them in one go.

        A sink with ``publish_many`` (the Redis Stream) sends them in one round
        trip instead of one per event; the in-process bus delivers them one by one.
        """
        if not events:
            return
        self._forward_to_parents(run_id, events)
        for event in events:
            self.bus.publish(run_id, event)
        for sink in self.sinks:
            publish_many = getattr(sink, "publish_many", None)
            if publish_many is not None:
                publish_many(run_id, events)
            else:
                for event in events:
                    sink.publish(run_id, event)

    def _forward_to_parents(self, run_id: str, events: list[StreamEvent]) -> None:
        """Publish, before ``events`` themselves, their ``agent_stream`` wrappers for the assembly runs
        enclosing ``run_id``: through a local link, or on a worker along the child's chain, to the
        enclosing runs' streams (docs/architecture.md, "Agent streams")."""
        self.agent_stream_links.forward(run_id, events, self._publish_wrapper, self.bus.observed)
        run = self._live.get(run_id) or self.recent.get(run_id)
        if run is None or run.invocation.get("agent_stream_chain") is None:
            return
        for event in events:
            for ancestor_id, wrapper in chain_wrappers(run, event):
                self.bus.publish(ancestor_id, wrapper)
                for sink in self.sinks:
                    sink.publish(ancestor_id, wrapper)

    def _publish_wrapper(self, run_id: str, wrapper: StreamEvent) -> None:
        """A linked child's wrapper, for its parent's Runs in this process (and, linked in turn,
        the parent's parent): live-only, so it goes to no sink (docs/architecture.md, "Agent streams")."""
        self.agent_stream_links.forward(run_id, [wrapper], self._publish_wrapper, self.bus.observed)
        self.bus.publish(run_id, wrapper)

    # -- cancel and interjection hints ----------------------------------------------------

    def cancel_requested(self, run_id: str) -> bool:
        """Has anyone (any process) asked to cancel? Polls the store at most once a second.

        A poll the store cannot answer (an outage, a lock) counts as "no cancel
        seen yet": the next poll, a second later, asks again. Retrying for
        seconds and then raising would fail a run streaming through a database
        restart although nothing is wrong with it.
        """
        if run_id in self.cancel_flags:
            return True
        now = time.monotonic()
        if now - self.flag_polls.get(run_id, 0.0) < CANCEL_POLL_SECONDS:
            return False
        self.flag_polls[run_id] = now
        try:
            _status, cancel, _holder = self.store.run_flags_once(run_id)
        except RunNotFoundError:
            return False
        except Exception as exc:
            if not is_transient(exc):
                raise
            log.debug(
                "the cancel flag of run %s could not be read (%s); asked again in %.0f s",
                run_id,
                exc,
                CANCEL_POLL_SECONDS,
            )
            return False
        if cancel:
            self.note_cancel_requested(run_id)
        return cancel

    def note_cancel_requested(self, run_id: str) -> None:
        self.cancel_flags[run_id] = True

    def clear_stale_cancel(self, run_id: str) -> None:
        """The store says nobody asked to cancel: forget a cancel this process saw earlier.

        A cancelled run can be retried (lg_core.replay); a worker that noticed the
        old cancel must not stop the retried run because of it.
        """
        with self.lock:
            if self.cancel_flags.pop(run_id, None) is not None:
                self.flag_polls.pop(run_id, None)
            # Checked even without a flag: the flags are bounded, so it may have been forgotten.
            cached = self.recent.get(run_id)
            if cached is None or not cached.cancellation_token.cancelled:
                return
            del self.recent[run_id]
            busy = run_id in self.heartbeat.executing_runs()
        if busy:  # a step of the old incarnation still runs with its resources: closed at shutdown
            self._retired.append(cached)
        else:
            close_rebuilt(cached)

    def interjections_may_be_pending(self, run_id: str) -> bool:
        """False only when this process knows the run has none (so a model turn skips the read)."""
        return self.interjections.get(run_id, 1) > 0

    def note_interjections(self, run_id: str, pending: int) -> None:
        self.interjections[run_id] = pending


def close_rebuilt(run: EngineRun) -> None:
    """Close a rebuilt run's resources as its run ends here; a failure is logged, not raised,
    since the run's outcome is already committed and nobody waits on this process for it."""
    try:
        run.close()
    except Exception as exc:  # noqa: BLE001 - the committed outcome stands
        log.warning("closing the resources of run %s failed: %r", run.id, exc)


__all__ = ["CANCEL_POLL_SECONDS", "RunRegistry", "close_rebuilt"]
