"""One submit of a batch: the loop that starts items within the limits, collects their results and
keeps the batch row current."""

from __future__ import annotations

import threading
import time
from array import array
from collections import Counter, deque
from collections.abc import Callable, Iterable, Iterator
from itertools import islice
from typing import Any

from lg_core.agent import Agent
from lg_core.errors import RunStateError, StoreUnavailableError
from lg_core.lease_holders import holder_is_dead
from lg_core.rate_limit import RateLimit
from lg_core.store.outage_waits import StoreOutage
from lg_core.store.records import RUN_TERMINAL
from lg_core.store.statements import STATUS_CHUNK
from lg_scheduler.batch_ids import run_id_for
from lg_scheduler.batch_inputs import BatchInputs, ItemKey
from lg_scheduler.batch_output import (
    BatchProgress,
    ResultWriter,
    ScanProgress,
    error_result,
    invalid_result,
    run_result,
)
from lg_scheduler.batch_report import BatchReport

POLL_SECONDS = 0.1
SAVE_SECONDS = 0.5
CLASSIFY_CHUNK = 512  # items whose runs' statuses one look-up reads (the store splits it further)


class Submission:
    """One submit of a batch: start items within the limits, collect results, keep the batch row current."""

    def __init__(
        self,
        runtime: Any,
        agent_cls: type[Agent],
        inputs: BatchInputs,
        batch_id: str,
        holder: str,
        concurrency: int,
        limit: RateLimit | None,
        gone: str | None = None,
    ) -> None:
        self.runtime = runtime
        self.store = runtime.store
        self.agent_cls = agent_cls
        self.inputs = inputs
        self.holder = holder
        self.concurrency = concurrency
        self.limit_options = {} if limit is None else {"rate_limit": str(limit)}
        self.gone = gone  # a submitter taken over with force: its runs count as orphaned
        self.report = BatchReport(batch_id, f"{agent_cls.__module__}:{agent_cls.__qualname__}", inputs.total)
        self.pending = _IndexQueue()  # items to start (their indices in the inputs), in file order
        self.orphans: deque[tuple[str, ItemKey]] = deque()  # runs of a dead submitter's threads
        self.in_flight: dict[str, ItemKey] = {}
        self.wake = threading.Event()
        self.outcomes: Counter[str] = Counter()
        self._resumed: set[str] = set()
        self._waiting: set[str] = set()  # in-flight runs last seen pending (waiting for their session)
        self._sessions: dict[str, tuple[str, str | None]] = {}  # run id -> (session id, actor id), read once
        self._resume_failures: list[tuple[str, BaseException]] = []  # appended by resume threads
        self.progress: BatchProgress | None = None  # the bar, started once on_start has printed
        self._outage: StoreOutage | None = None  # while the store cannot be reached
        self._saved_at = 0.0
        # On threads a run's terminal event wakes the loop; on workers, on_event would
        # start a reader thread per run, so the loop only polls the store.
        self._start_options = {} if runtime.configuration.broker_url else {"on_event": self._on_event}

    # -- the loop ----------------------------------------------------------------------

    def run(self, writer: ResultWriter, progress: bool, on_start: Callable[[BatchReport], Any] | None) -> BatchReport:
        self.writer = writer
        finished = False
        try:
            looking = ScanProgress(progress, f"batch {self.report.batch_id}: looking up its runs", unit="items")
            try:
                self._classify(looking)
            finally:
                looking.close()
            if on_start is not None:
                on_start(self.report)
            # Only now: a line on_start prints while the bar is live would land inside its frame.
            self.progress = BatchProgress(progress, self.report.batch_id, self.inputs.total)
            self._show()
            while self.pending or self.orphans or self.in_flight:
                self.wake.clear()  # before looking, so a run ending from here on cuts the wait short
                try:
                    self._fill()
                    changed = self._collect()
                except StoreUnavailableError as error:
                    self._wait_out(error)
                    continue
                self._store_answers()
                self._show()
                if not changed:
                    self.wake.wait(POLL_SECONDS)
            finished = True
        finally:
            kept = self._save_last(finished)
            if self.progress is not None:
                self.progress.close()
            writer.close()
        if not kept:  # taken over after its last periodic save: the batch is the other submit's now
            raise self._taken_over()
        self.report.out, self.report.results = writer.path, writer.results
        self.report.outcomes = dict(self.outcomes)
        return self.report

    def _wait_out(self, error: StoreUnavailableError) -> None:
        """Pause the loop while the store cannot be reached (pauses grow from 0.1 s to 2 s)."""
        self._outage = self._outage or StoreOutage(f"batch {self.report.batch_id}", limit=None)
        time.sleep(self._outage.pause_after(error))

    def _store_answers(self) -> None:
        if self._outage is not None:
            self._outage.ended()
            self._outage = None

    def _classify(self, on_progress: Callable[[int, int, int], Any]) -> None:
        """Sort items by what their run's state says: finished, in flight, orphaned, or not started.

        A chunk of item ids at a time: of the items to start, only their indices are kept.
        The batch row is saved as for the loop: a resubmit of a large batch takes a while
        here, and ``lg batch status`` shows its counts growing, and a takeover stops it.
        """
        for invalid in self.inputs.invalid:
            self._finish(invalid_result(invalid))
        looked_up = 0
        for chunk in _chunks(self.inputs.keys(), CLASSIFY_CHUNK):
            while True:
                try:
                    self._classify_chunk(chunk)
                    break
                except StoreUnavailableError as error:  # nothing of the chunk was kept: look it up again
                    self._wait_out(error)
            self._store_answers()
            looked_up += len(chunk)
            on_progress(len(self.inputs), looked_up, looked_up)
            self._save_when_due()

    def _classify_chunk(self, chunk: list[ItemKey]) -> None:
        """Every read first (statuses, then the results of finished runs), then the changes:
        a store outage in the middle leaves nothing half done."""
        run_ids = {run_id_for(self.report.batch_id, item.id): item for item in chunk}
        known = self.store.run_statuses(list(run_ids))
        finished_ids = [run_id for run_id in run_ids if known.get(run_id, (None, None))[0] in RUN_TERMINAL]
        outcomes = self._outcomes(finished_ids)
        for run_id, item in run_ids.items():
            status, holder = known.get(run_id, (None, None))
            if status is None:
                self.pending.append(item.position)
            elif status in RUN_TERMINAL:
                self.report.already_finished += 1
                self._finish(run_result(item, outcomes[run_id]))
            elif status != "pending" and self._orphaned(holder):
                self.report.waited += 1
                self.report.resumed += 1
                self.orphans.append((run_id, item))
            else:
                self.report.waited += 1
                self.in_flight[run_id] = item
                if status == "pending":
                    self._waiting.add(run_id)

    def _outcomes(self, run_ids: list[str]) -> dict[str, Any]:
        """The stored outcomes of finished runs, STATUS_CHUNK runs a statement."""
        outcomes: dict[str, Any] = {}
        for start in range(0, len(run_ids), STATUS_CHUNK):
            outcomes.update(self.store.run_outcomes(run_ids[start : start + STATUS_CHUNK]))
        return outcomes

    def _write_finished(self, finished: list[str]) -> None:
        """The result lines of in-flight runs that finished, read STATUS_CHUNK runs a statement (and held no more).

        A chunk's runs leave ``in_flight`` as their lines are written, after the
        chunk's read: when the store fails in the middle, the runs not written
        yet are still in flight, and the next look writes them, once.
        """
        for start in range(0, len(finished), STATUS_CHUNK):
            chunk = finished[start : start + STATUS_CHUNK]
            outcomes = self.store.run_outcomes(chunk)
            for run_id in chunk:
                self._finish(run_result(self.in_flight.pop(run_id), outcomes[run_id]))

    def _orphaned(self, holder: str | None) -> bool:
        """Held by a submitter's thread that will never finish it: a dead process, or the one taken over."""
        return bool(holder) and (holder == self.gone or holder_is_dead(holder))

    def _fill(self) -> None:
        """Start what the concurrency limit allows (model calls are paced by the runs themselves).

        An orphan that a waiting run of this batch waits for (the running run of
        its session) is resumed even when no slot is free: that waiting run holds
        a slot but cannot start before the orphan ends, so the orphan runs in its
        slot. Left for a free slot, it would wait for the waiting run, which
        waits for it (a resubmit with a lower ``--concurrency``).
        """
        if self.orphans:
            blocking = self._sessions_waited_on()
            for orphan in list(self.orphans):
                if len(self.in_flight) < self.concurrency or self._session_of(orphan[0]) in blocking:
                    self.orphans.remove(orphan)
                    self._resume_orphan(*orphan)
        while self.pending and len(self.in_flight) < self.concurrency:
            self._start(self.pending.popleft())

    def _sessions_waited_on(self) -> set[tuple[str, str | None]]:
        """The sessions of the in-flight runs last seen waiting for their turn."""
        return {self._session_of(run_id) for run_id in self._waiting if run_id in self.in_flight}

    def _session_of(self, run_id: str) -> tuple[str, str | None]:
        key = self._sessions.get(run_id)
        if key is None:
            record = self.store.load_run(run_id)
            key = self._sessions[run_id] = (record.session_id, record.actor_id)
        return key

    def _start(self, index: int) -> None:
        item = self.inputs.item(index)  # read from the file now: only started items' text is in memory
        run_id = run_id_for(self.report.batch_id, item.id)
        try:
            started = self._start_run(item, run_id)
        except StoreUnavailableError:
            # Started again once the store answers; a run this try did create is found then
            # (start_execution refuses its id, and the run is in the store).
            self.pending.unpop(index)
            raise
        if started:
            self.report.started += 1
            self.in_flight[run_id] = ItemKey(index, item.line, item.id)

    def _start_run(self, item: Any, run_id: str) -> bool:
        """Start one item's run; False when it could not start (its error line is written)."""
        try:
            options = {**item.options, **self.limit_options, **self._start_options}
            self.agent_cls.start_execution(item.message, run_id=run_id, **options)
        except StoreUnavailableError:
            raise
        except Exception as exc:  # noqa: BLE001 - one item's failure to start must not stop the batch
            if run_id not in self.store.run_statuses([run_id]):
                self._finish(error_result(item, run_id, exc))
                return False
        return True

    def _resume_orphan(self, run_id: str, item: ItemKey) -> None:
        """Continue, on a thread here, a run whose process (a submitter's thread) died."""
        self.in_flight[run_id] = item
        self._resumed.add(run_id)

        def resume() -> None:
            try:
                self.runtime.resume(run_id, force=self.gone is not None)
            except (RunStateError, StoreUnavailableError):
                # Another process took it over (the loop waits for its end in the store), or it
                # cannot start yet, or the store is down: looked at again, and resumed if still
                # orphaned, once it can.
                self._resumed.discard(run_id)
            except Exception as exc:  # noqa: BLE001 - reported as the item's result; the next submit retries
                self._resume_failures.append((run_id, exc))
            finally:
                self.wake.set()

        threading.Thread(target=resume, name=f"lg-batch-resume-{run_id[-8:]}", daemon=True).start()

    def _collect(self) -> bool:
        """Write the results of in-flight runs that finished; True if any did.

        A run whose process died while this submit waited for it (it ran on a
        thread of another process) is resumed here.
        """
        if not self.in_flight:
            return False
        changed = self._collect_resume_failures()
        statuses = self.store.run_statuses(list(self.in_flight))
        finished: list[str] = []
        for run_id, (status, holder) in statuses.items():
            if status == "pending":
                self._waiting.add(run_id)
            else:
                self._waiting.discard(run_id)
            if status in RUN_TERMINAL:
                finished.append(run_id)
            elif status != "pending" and run_id not in self._resumed and self._orphaned(holder):
                # e.g. a run that waited for its session and was activated holding a dead submitter
                self.report.resumed += 1
                self._resume_orphan(run_id, self.in_flight[run_id])
        self._write_finished(finished)
        return changed or bool(finished)

    def _collect_resume_failures(self) -> bool:
        failures, self._resume_failures = self._resume_failures, []
        for run_id, error in failures:
            item = self.in_flight.pop(run_id, None)
            if item is not None:
                self._finish(error_result(item, run_id, error, outcome="failed"))
        return bool(failures)

    def _on_event(self, event: Any) -> None:
        if event.terminal:
            self.wake.set()

    # -- results and progress ---------------------------------------------------------------

    def _finish(self, result: dict[str, Any]) -> None:
        self.writer.write(result)
        outcome = result["outcome"]
        self.outcomes[outcome] += 1
        if outcome == "completed":
            self.report.completed += 1
        elif outcome == "invalid":
            self.report.invalid += 1
        else:
            self.report.failed += 1

    def _counts(self) -> dict[str, int]:
        report = self.report
        return {
            "completed": report.completed,
            "failed": report.failed,
            "invalid": report.invalid,
            "running": len(self.in_flight),
        }

    def _show(self) -> None:
        counts = self._counts()
        if self.progress is not None:
            self.progress.update(counts)
        self._save_when_due()

    def _save_when_due(self) -> None:
        if time.monotonic() - self._saved_at >= SAVE_SECONDS:
            self._save()

    def _save(self, final: bool = False, finished: bool = False) -> bool:
        """Keep the batch row current for ``lg batch status`` (at most every SAVE_SECONDS while running).

        Stops this submit if another process took the batch over (``--force``);
        the final save only says whether this submit still held it.
        """
        self._saved_at = time.monotonic()
        try:
            kept: bool = self.store.update_batch(
                self.report.batch_id, self.holder, self._counts(), finished=finished, release=final
            )
        except Exception:  # noqa: BLE001 - a status row must not fail the batch; the next save retries
            if finished:
                raise
            return True
        if not kept and not final:
            raise self._taken_over()
        return kept

    def _save_last(self, finished: bool) -> bool:
        """The final save; a finished batch's row must say so, so it waits out a store outage."""
        while True:
            try:
                return self._save(final=True, finished=finished)
            except StoreUnavailableError as error:
                self._wait_out(error)

    def _taken_over(self) -> RunStateError:
        batch_id = self.report.batch_id
        return RunStateError(
            f"batch {batch_id} was taken over by another process (see lg batch status {batch_id}); "
            "this submit stops here and that one carries on"
        )


class _IndexQueue:
    """Indices of items to start, in file order: 4 bytes each, not the items themselves."""

    def __init__(self) -> None:
        self._indices: array[int] = array("I")
        self._next = 0

    def append(self, index: int) -> None:
        self._indices.append(index)

    def popleft(self) -> int:
        index = self._indices[self._next]
        self._next += 1
        return index

    def unpop(self, index: int) -> None:
        """Put back the index ``popleft`` returned last (its item could not be started yet)."""
        if self._next == 0 or self._indices[self._next - 1] != index:
            raise ValueError(f"item index {index} was not the last one taken")
        self._next -= 1

    def __len__(self) -> int:
        return len(self._indices) - self._next


def _chunks(values: Iterable[Any], size: int) -> Iterator[list[Any]]:
    iterator = iter(values)
    while chunk := list(islice(iterator, size)):
        yield chunk


__all__ = ["CLASSIFY_CHUNK", "POLL_SECONDS", "SAVE_SECONDS", "Submission"]
