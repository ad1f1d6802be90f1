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

import inspect
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sqlalchemy.engine import make_url

from lg_core.agent import Agent
from lg_core.errors import InvocationError, RunStateError
from lg_core.lease_holders import current_holder, holder_is_dead
from lg_core.rate_limit import RateLimit
from lg_core.runtime import current_runtime
from lg_core.store.records import BatchRecord
from lg_scheduler._batch_submission import Submission
from lg_scheduler.batch_ids import BATCH_ID, default_batch_id, run_id_for
from lg_scheduler.batch_inputs import (
    DEFAULT_MAX_LINE_BYTES,
    BatchInputError,
    BatchInputs,
    check_max_line_bytes,
    input_path,
    read_inputs,
)
from lg_scheduler.batch_output import ResultWriter, ScanProgress, check_not_overwriting, check_writable
from lg_scheduler.batch_report import BatchReport
from lg_scheduler.output_lock import output_locked
from lg_workers.broker_check import check_broker

MAX_CONCURRENCY = 10_000
FAILED_OUTCOMES = ("failed", "partial", "cancelled", "not_started")


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
            submission = Submission(runtime, agent_cls, inputs, batch_id, holder, concurrency, limit, gone)
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
        submitted_with = "agent " + record.agent if record.agent != agent else "a different input file"
        raise InvocationError(
            f"batch {batch_id} was submitted with {submitted_with} "
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


def load_status(store: Any, batch_id: str) -> BatchRecord:
    """The stored batch row, or InvocationError naming how to find batch ids."""
    record: BatchRecord | None = store.load_batch(batch_id)
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
