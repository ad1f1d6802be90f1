"""The protocols a way of executing runs implements.

Three backends exist: the in-process dispatcher a blocking ``ask`` drives
(``lg_core.engine.local``), threads of this process for ``start_execution``
without a broker (``ThreadBackend``), and Celery workers
(``lg_workers.celery_backend.CeleryBackend``). Everything above the engine sees a
backend only through ``ExecutionBackend``, so lg_core never imports Celery or Redis.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, runtime_checkable

from lg_core.engine.dispatcher import StepRef
from lg_core.events import StreamEvent
from lg_core.rate_limit import Limiter

if TYPE_CHECKING:
    from lg_core.run import Run


class LiveSource(Protocol):
    """Where live events of one run can be read in order (a Redis Stream, an in-process log).

    A source may also offer ``async def acovers(position)`` and ``async def
    aread(position, block)``; async readers use them instead of a worker thread,
    and await its ``aclose()`` (if it has one) when their iteration ends.
    """

    def covers(self, position: str) -> bool:
        """True if every entry after ``position`` is still available."""

    def read(self, position: str, block: float) -> list[tuple[str, StreamEvent]] | None:
        """Entries after ``position`` (waiting up to ``block`` seconds for one); None if unreachable."""

    def locate(self, seq: int) -> str | None:
        """A position after which the source holds what followed durable event ``seq``: that
        event's own, or the one just before event ``seq`` + 1; None if it holds neither.
        Optional: a source without it makes a reader from a bare seq backfill from the store."""

    def end(self) -> str | None:
        """The position of the newest entry now, so a read after it returns only what comes next
        (``Execution.wait`` waits there for the terminal event); None if unreachable.
        Optional: a source without it is read from its start."""


class ExecutionBackend(Protocol):
    """Where ``start_execution`` runs execute: threads of this process (``ThreadBackend``, the
    default) or Celery workers (lg_workers' ``CeleryBackend``, loaded through the
    ``littleghost.backends`` entry point when ``broker_url`` is set). Execution handles,
    replay and the runtime talk to a backend only through this."""

    def start(self, run: Run) -> None:
        """Execute the stored, started ``run`` (its first steps were committed by the caller)."""

    def live_source(self, run_id: str) -> LiveSource | None:
        """Where the run's live events can be read, if anywhere."""

    def wait_local(self, run_id: str, timeout: float | None) -> bool:
        """Wait for the run if this process drives it; False when it does not."""

    def executes_here(self, run_id: str) -> bool:
        """True while this process executes the run (so its live Run object is the truth)."""

    def check_reachable(self) -> None:
        """Raise ConfigurationError, saying what to fix, when runs handed over now would sit
        with nobody to execute them (a broker that does not answer)."""

    def shutdown(self) -> None:
        """Stop executing here; runs left unfinished are resumed from their last commit."""


@runtime_checkable
class DistributedBackend(ExecutionBackend, Protocol):
    """A backend whose steps run in other processes: steps are sent as messages, and rate
    limits are shared between the processes."""

    rate_limiter: Limiter

    def publish(self, refs: list[StepRef]) -> None:
        """Send one message per step (ids only); a duplicate is harmless."""

    def advance(self, run_id: str) -> None:
        """Ask a worker to continue the run from the store (its next steps, or its ending)."""


__all__ = ["DistributedBackend", "ExecutionBackend", "LiveSource"]
