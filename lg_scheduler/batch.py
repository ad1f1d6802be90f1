"""Batches: a JSONL file of inputs run as durable runs, throttled, tracked and resumable.

    from lg_scheduler.batch import submit_batch
    report = submit_batch(SupportAgent, "inputs.jsonl", concurrency=50, rate_limit="600/min",
                          out="results.jsonl")

or ``lg batch submit myapp.agents:SupportAgent inputs.jsonl --concurrency 50 --out results.jsonl``.

How it works:

* Every line is validated first (:mod:`lg_scheduler.batch_inputs`); a bad line
  stops the batch before anything is submitted, unless ``skip_invalid``.
* Each item becomes a run whose id is derived from the batch id and the item
  id (:func:`run_id_for`); the batch id defaults to a hash of the agent path and
  the input file's bytes. Runs start with ``start_execution``: on Celery workers
  when a broker is configured, else on threads of this process.
* At most ``concurrency`` runs are in flight. ``rate_limit`` becomes every
  run's own ``rate_limit``: each model call of the batch's runs waits for its
  slot on its provider connection, shared through Redis by every worker and
  every batch on that connection (:mod:`lg_core.rate_limit`). An item's own
  ``rate_limit`` field applies when the batch sets none.
* The run store is the source of truth: the submitter polls its in-flight runs'
  statuses there (one statement per 16 runs, and as many for the results of
  those that finished; a terminal event in this process wakes it early) and
  writes each result as the run finishes (:mod:`lg_scheduler.batch_output`).
* Submitting the same batch again resumes it: a run that finished is not run
  again (its result is written from the store), a run still running is waited
  for (or, if it ran on a thread of a submitter that died, resumed here from its
  last committed step), and items without a run are started. On workers, a
  submitter killed between writing a run and publishing its first step leaves
  that step to the outbox relay of ``lg scheduler``, as for any distributed
  run: run the scheduler wherever workers run.
* Memory is bounded by the concurrency, not by the input file: items are read
  back from the file when they start (:class:`~lg_scheduler.batch_inputs.BatchInputs`
  keeps 12 bytes per line), results go to ``out`` as they finish, and
  ``BatchReport.results`` keeps them in memory only when asked to (by default,
  only when there is no ``out`` file).
* The ``lg_batches`` row (id, agent, input hash, counts, submitting process,
  created/updated) lets ``lg batch status`` show progress from any process. Two
  live submitters of one batch are refused.
* A database outage does not stop a submit: a store call that gives up
  (StoreUnavailableError) pauses the loop, as a reader of a run pauses
  (:mod:`lg_core.store.outage_waits`), and the loop goes on from where it was once
  the database answers. An item whose start failed that way is started again
  (finding its run if the start had in fact created it); a result is written
  only after its read succeeded, so none is lost or written twice.
"""

from __future__ import annotations

import hashlib
import inspect
import os
import re
import threading
import time
from array import array
from collections import Counter, deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path
from typing import Any

from sqlalchemy.engine import make_url

from lg_core.agent import Agent
from lg_core.errors import InvocationError, RunStateError, StoreUnavailableError
from lg_core.lease_holders import current_holder, holder_is_dead
from lg_core.rate_limit import RateLimit
from lg_core.runtime import current_runtime
from lg_core.store.outage_waits import StoreOutage
from lg_core.store.records import RUN_TERMINAL, BatchRecord
from lg_core.store.statements import STATUS_CHUNK
from lg_scheduler.batch_inputs import (
    DEFAULT_MAX_LINE_BYTES,
    BatchInputError,
    BatchInputs,
    ItemKey,
    check_max_line_bytes,
    input_path,
    read_inputs,
)
from lg_scheduler.batch_output import (
    BatchProgress,
    ResultWriter,
    ScanProgress,
    check_not_overwriting,
    check_writable,
    error_result,
    invalid_result,
    run_result,
)
from lg_scheduler.output_lock import output_locked
from lg_workers.broker_check import check_broker

BATCH_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")
_READABLE_ITEM_ID = re.compile(r"^[A-Za-z0-9._@-]{1,63}$")
MAX_CONCURRENCY = 10_000
POLL_SECONDS = 0.1
SAVE_SECONDS = 0.5
CLASSIFY_CHUNK = 512  # items whose runs' statuses one look-up reads (the store splits it further)
FAILED_OUTCOMES = ("failed", "partial", "cancelled", "not_started")


@dataclass
class BatchReport:
    """What a submit did.

    ``results`` are the result lines, in the order items finished, when the submit
    kept them (``keep_results``; by default only without an ``out`` file). A batch
    writing to ``out`` leaves it empty, so that its memory does not grow with the
    number of items: read the file instead.
    """

    batch_id: str
    agent: str
    total: int
    completed: int = 0
    failed: int = 0
    invalid: int = 0
    already_finished: int = 0  # items whose run had finished before this submit (results from the store)
    waited: int = 0  # runs already in flight when this submit began (waited for or resumed)
    resumed: int = 0  # of those, runs of a dead submitter resumed here
    started: int = 0  # runs this submit started
    outcomes: dict[str, int] = field(default_factory=dict)
    out: Path | None = None
    results: list[dict[str, Any]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Every item's run completed."""
        return self.completed == self.total


def default_batch_id(agent_cls: type, digest: str) -> str:
    """``<agent_id>-<12 hex>``: a hash of the agent's import path and the input file's sha256."""
    path = f"{agent_cls.__module__}:{agent_cls.__qualname__}"
    hashed = hashlib.sha256(f"{path}\n{digest}".encode()).hexdigest()[:12]
    prefix = re.sub(r"[^A-Za-z0-9_-]", "-", getattr(agent_cls, "agent_id", "batch"))[:40].strip("-_") or "batch"
    return f"{prefix}-{hashed}"


def run_id_for(batch_id: str, item_id: str) -> str:
    """The run id of an item: ``<batch>.<item>``, or ``<batch>:<hash>`` for ids that are not plain.

    Batch ids contain neither ``.`` nor ``:``, so the two forms never collide with
    each other or with another batch's run ids.
    """
    if _READABLE_ITEM_ID.fullmatch(item_id):
        return f"{batch_id}.{item_id}"
    return f"{batch_id}:{hashlib.sha256(item_id.encode()).hexdigest()[:32]}"


def submit_batch(
    agent_cls: type[Agent],
    inputs_path: str | os.PathLike[str],
    *,
    concurrency: int,
    rate_limit: str | RateLimit | None = None,
    out: str | os.PathLike[str] | None = None,
    batch_id: str | None = None,
    progress: bool = True,
    skip_invalid: bool = False,
    force: bool = False,
    on_start: Callable[[BatchReport], Any] | None = None,
    keep_results: bool | None = None,
    max_line_bytes: int | str = DEFAULT_MAX_LINE_BYTES,
) -> BatchReport:
    """Run every line of ``inputs_path`` as a run of ``agent_cls``; resumes if submitted before.

    Uses the active configuration's runtime (run store, broker). Raises
    InvocationError (BatchInputError for invalid lines) or ConfigurationError
    before anything is submitted; RunStateError when a live process is already
    submitting this batch (``force`` takes it over anyway, e.g. from a process on
    another host that is known to be gone), and InvocationError when another batch
    is writing to ``out`` (lg_scheduler.output_lock). ``on_start`` receives the report
    once the batch's state is known (its id and what earlier submits did),
    before the first new run starts. ``keep_results`` keeps every result line in
    ``BatchReport.results`` too (default: only when ``out`` is None); a large batch
    should write to ``out`` and keep none, so its memory stays bounded by ``concurrency``.
    ``max_line_bytes`` (bytes, or text such as ``"4MiB"``) caps an input line: a longer
    one is that line's error, as an invalid line is.
    """
    if not (isinstance(agent_cls, type) and issubclass(agent_cls, Agent)) or agent_cls is Agent:
        raise InvocationError(f"a batch runs an Agent subclass, got {agent_cls!r}")
    concurrency = _check_concurrency(concurrency)
    max_line_bytes = check_max_line_bytes(max_line_bytes)
    limit = None if rate_limit is None else RateLimit.parse(rate_limit)
    if batch_id is not None and (not isinstance(batch_id, str) or not BATCH_ID.fullmatch(batch_id)):
        raise InvocationError(
            f"batch id must be 1-64 letters, digits, '_' or '-' (starting with a letter or digit), got {batch_id!r}"
        )
    in_path = input_path(inputs_path)
    out_path = check_writable(out)
    _check_options(
        progress=progress, skip_invalid=skip_invalid, force=force, keep_results=keep_results, on_start=on_start
    )
    runtime = current_runtime()
    if out_path is not None:
        protected = [in_path, *_store_files(runtime.configuration.run_store)]
        check_not_overwriting(out_path, protected)
    keep = out_path is None if keep_results is None else bool(keep_results)
    checking = ScanProgress(progress, f"checking {inputs_path}")
    try:
        scanned = read_inputs(
            inputs_path, agent_cls, runtime.resolver, on_progress=checking, max_line_bytes=max_line_bytes
        )
    finally:
        checking.close()
    with scanned as inputs:
        batch_id = batch_id or default_batch_id(agent_cls, inputs.digest)
        if inputs.invalid and not skip_invalid:
            raise _input_error(inputs, _skipped_before(runtime.store, batch_id, inputs))
        _check_broker(runtime)
        holder = current_holder()
        with output_locked(out_path, batch_id, holder):
            gone = _claim(runtime.store, batch_id, agent_cls, inputs, holder, force)
            submission = _Submission(runtime, agent_cls, inputs, batch_id, holder, concurrency, limit, gone)
            return submission.run(ResultWriter(out_path, keep), progress, on_start)


def _check_concurrency(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_CONCURRENCY:
        raise InvocationError(f"concurrency must be an integer from 1 to {MAX_CONCURRENCY}, got {value!r}")
    return value


def _check_options(*, on_start: Any, keep_results: Any, **flags: Any) -> None:
    """Refuse a wrong type now: a truthy non-bool (``force="no"``) would act as True, and a
    non-callable ``on_start`` would fail only once the batch's row was written."""
    for name, value in flags.items():
        if not isinstance(value, bool):
            raise InvocationError(f"{name} must be True or False, got {value!r}")
    if keep_results is not None and not isinstance(keep_results, bool):
        raise InvocationError(f"keep_results must be True, False or None (the default), got {keep_results!r}")
    if on_start is not None and not callable(on_start):
        raise InvocationError(
            f"on_start must be None or a function called with the BatchReport, got {type(on_start).__name__}"
        )
    if on_start is not None and inspect.iscoroutinefunction(on_start):
        raise InvocationError(
            "on_start must be a plain function: it is called without an event loop, so an async one never runs"
        )


def _skipped_before(store: Any, batch_id: str, inputs: BatchInputs) -> str | None:
    """``batch_id`` if this file was submitted as that batch already, its invalid lines skipped.

    A batch row exists only once its invalid lines were accepted, so the batch has
    runs: fixing the lines would make a new file, a new batch, and run every item again.
    """
    record = store.load_batch(batch_id)
    return batch_id if record is not None and record.input_hash == inputs.digest else None


def _input_error(inputs: BatchInputs, skipped_by: str | None) -> BatchInputError:
    shown = [f"  {problem}" for problem in inputs.invalid[:10]]
    more = len(inputs.invalid) - len(shown)
    if more:
        shown.append(f"  ... and {more} more")
    count = len(inputs.invalid)
    lines = f"{inputs.path} has {count} invalid line{'s' if count > 1 else ''}"
    if skipped_by is None:
        advice = (
            "; nothing was submitted (fix them, or pass --skip-invalid / skip_invalid=True to run the rest "
            "and report these as invalid)"
        )
    else:
        advice = (
            f", which batch {skipped_by} skipped when it was submitted with --skip-invalid / skip_invalid=True; "
            "pass that again to resume it (nothing was submitted now; a fixed file would be a new batch, "
            "running every item again)"
        )
    return BatchInputError(f"{lines}{advice}:\n" + "\n".join(shown), problems=list(inputs.invalid), batch_id=skipped_by)


def _store_files(run_store: str) -> list[Path]:
    """The files of a SQLite file store (what ``--out`` must never truncate)."""
    url = make_url(run_store)
    if url.get_backend_name() != "sqlite" or url.database in (None, "", ":memory:"):
        return []
    return [Path(url.database + suffix) for suffix in ("", "-wal", "-shm", "-journal")]


def _check_broker(runtime: Any) -> None:
    """Refuse to start a batch whose runs could not be sent to the workers."""
    url = runtime.configuration.broker_url
    if url:
        check_broker(url)


def _claim(store: Any, batch_id: str, agent_cls: type, inputs: BatchInputs, holder: str, force: bool) -> str | None:
    """Create the batch row, or take it over from a submitter that is gone.

    Returns the submitter taken over when ``force`` overrode its liveness (a process
    on another host that is gone): the runs it held on threads are resumed here.
    """
    agent = f"{agent_cls.__module__}:{agent_cls.__qualname__}"
    row = {
        "id": batch_id,
        "agent": agent,
        "input_hash": inputs.digest,
        "input_path": str(inputs.path.resolve()),
        "total": inputs.total,
        "holder": holder,
    }
    record, created = store.open_batch(row)
    if created:
        return None
    if record.agent != agent or record.input_hash != inputs.digest:
        raise InvocationError(
            f"batch {batch_id} was submitted with {'agent ' + record.agent if record.agent != agent else 'a different input file'} "
            f"(input sha256 {record.input_hash[:12]}); re-submit that, or choose another batch id"
        )
    if record.holder not in (None, holder) and not holder_is_dead(record.holder) and not force:
        raise RunStateError(
            f"batch {batch_id} is being submitted by process {record.holder}, which looks alive; wait for it "
            "(lg batch status), or stop it and submit again to resume (pass --force / force=True if that "
            "process ran on another host and is gone)"
        )
    if not store.claim_batch(batch_id, holder, record.holder, inputs.total):
        raise RunStateError(f"another process took over batch {batch_id} just now; see lg batch status {batch_id}")
    forced = force and record.holder not in (None, holder) and not holder_is_dead(record.holder)
    return record.holder if forced else None


class _Submission:
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
            kept = self.store.update_batch(
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


def load_status(store: Any, batch_id: str) -> BatchRecord:
    """The stored batch row, or InvocationError naming how to find batch ids."""
    record = store.load_batch(batch_id)
    if record is None:
        raise InvocationError(f"no batch {batch_id!r} in this run store; `lg batch list` shows the batches it has")
    return record


__all__ = [
    "BATCH_ID",
    "BatchInputError",
    "BatchReport",
    "RateLimit",
    "default_batch_id",
    "load_status",
    "run_id_for",
    "submit_batch",
]
