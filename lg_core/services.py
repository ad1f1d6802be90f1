"""Runtime: the services one configuration shares across runs.

It owns the run store, the model resolver, the engine, the local dispatcher
and the hooks. Build one explicitly only for an isolated setup; normally
``lg_core.runtime()`` builds it lazily from the active configuration.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from lg_core.engine.engine import Engine
from lg_core.engine.local import LocalDispatcher
from lg_core.errors import RunNotFoundError, RunStateError
from lg_core.identity import current_holder, holder_is_dead
from lg_core.models.resolver import ModelResolver
from lg_core.run import Run
from lg_core.store import RunRecord, RunStore

if TYPE_CHECKING:
    from lg_core.config import Configuration


class Hook:
    """Application hooks, instantiated once per Runtime; override what you need."""

    def prepare_run(self, run: Run) -> Run:
        """A newly built Run; register run-scoped resources here."""
        return run

    def prepare_execution(self, run: Run) -> Run:
        """Called right before the run starts executing."""
        return run

    def prepare_interjection(self, run: Run, payload: Any) -> Any:
        return payload

    def session_history(self, run: Run, stored: Any, fallback: Any) -> Any:
        return None

    def error_message(self, error: BaseException, run: Run) -> str | None:
        """A caller-safe message for ``error``, or None to defer to later hooks."""
        return None


class Runtime:
    def __init__(self, configuration: Configuration) -> None:
        self.configuration = configuration
        self.store = RunStore(configuration.run_store, synchronous=configuration.sqlite_synchronous)
        self.resolver = ModelResolver(
            providers=configuration.providers,
            models=configuration.models,
            default_model=configuration.default_model,
        )
        self.hooks: list[Hook] = [hook() for hook in configuration.hooks]
        self.engine = Engine(self, self.store, lease_seconds=configuration.lease_seconds)
        self.dispatcher = LocalDispatcher(self.engine, max_workers=configuration.max_parallel_tools)

    def execute(self, run: Run) -> None:
        """Start ``run`` and drive it to its end in this process."""
        unsubscribe = self.engine.bus.subscribe(run.id, run.deliver)
        try:
            for hook in self.hooks:
                hook.prepare_execution(run)
            self.dispatcher.drive(self.engine.start(run))
        finally:
            unsubscribe()

    def resume(self, run_id: str, *, force: bool = False) -> Run:
        """Continue a run whose process died, without redoing committed steps."""
        record = self.store.load_run(run_id)
        run = Run.from_record(record, self)
        if record.finished:
            return run
        self._check_holder(record, force)
        run._begin()
        unsubscribe = self.engine.bus.subscribe(run.id, run.deliver)
        try:
            self.dispatcher.drive(self.engine.resume_refs(run, record.holder))
        finally:
            unsubscribe()
            run._phase = "finished"
            run.close()
        if run.outcome is None:
            run.refresh()
        return run

    def _check_holder(self, record: RunRecord, force: bool) -> None:
        holder = record.holder
        if holder is None or holder == current_holder() or holder_is_dead(holder) or force:
            return
        raise RunStateError(
            f"run {record.id} is still held by process {holder}, which looks alive; "
            "resume only runs whose process died (pass force=True / --force if that process is on another "
            "host and you know it is gone)"
        )

    def get_run(self, run_id: str) -> Run:
        return Run.from_record(self.store.load_run(run_id), self)

    def list_runs(self, status: str | None = None, limit: int = 100) -> list[RunRecord]:
        return self.store.list_runs(status=status, limit=limit)

    def cancel(self, run_id: str) -> bool:
        if not self.store.request_cancel(run_id):
            self.store.load_run(run_id)  # raises RunNotFoundError for an unknown id
            return False
        return True

    def close(self) -> None:
        self.dispatcher.shutdown()
        self.resolver.close()
        self.store.close()


__all__ = ["Hook", "RunNotFoundError", "Runtime"]
