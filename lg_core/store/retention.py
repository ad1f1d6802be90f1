"""Retention: deleting finished runs older than a cutoff, with everything stored for them.

The run store keeps each run's steps, messages and events so that a run can be
inspected, retried and forked, and nothing else ever deletes them: a busy
deployment grows its store without end unless it prunes (Temporal's retention
period and Celery's ``result_expires`` exist for the same reason).

* Only finished runs (completed, failed, partial, cancelled) that finished
  before the cutoff go. A run retried between being selected and being deleted
  is left alone: its row is deleted only while still finished, first, and
  the rest only if that applied, in one transaction per run.
* The runs of a batch that has not finished (or finished after the cutoff)
  are kept: re-submitting it resumes from its runs, and would start pruned
  items again. A batch that finished before the cutoff goes with its runs, so
  submitting the same file later is a new batch.
* Sessions are not touched: a session's conversation lives in its own tables.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from lg_core.store.database import Database, retry_transient
from lg_core.store.records import RUN_TERMINAL

PAGE = 200
_BATCH_RUN_ID = re.compile(r"^([^.:]+)[.:]")  # lg_scheduler.batch.run_id_for: <batch>.<item> or <batch>:<hash>
_CHILD_ROWS = ("delete_run_messages", "delete_run_frames", "delete_run_steps", "delete_run_events", "delete_run_interjections")


@dataclass(frozen=True)
class PruneReport:
    """What a prune deleted (or, for a dry run, would delete)."""

    runs: int
    batches: int
    dry_run: bool = False


def prune(
    db: Database, cutoff: float, statuses: Sequence[str] = RUN_TERMINAL, *, dry_run: bool = False, limit: int | None = None
) -> PruneReport:
    """Delete the finished runs in ``statuses`` that finished before ``cutoff`` (epoch seconds).

    ``limit`` stops after that many runs, so a caller with other work (the scheduler's
    recovery loop) takes a large backlog a slice at a time; finished batches then wait
    for the pass that gets through every run.
    """
    kept_batches = set(_unfinished_batches(db, cutoff))
    count = 0
    for status in statuses:
        for run_id in _candidates(db, status, cutoff):
            if limit is not None and count >= limit:
                return PruneReport(count, 0, dry_run)
            if _batch_of(run_id) in kept_batches:
                continue
            count += 1 if dry_run else _delete_run(db, run_id, status, cutoff)
    if set(statuses) != set(RUN_TERMINAL):  # some of a batch's runs were kept: so is its row
        return PruneReport(count, 0, dry_run)
    batches = _count_finished_batches(db, cutoff) if dry_run else _delete_finished_batches(db, cutoff)
    return PruneReport(count, batches, dry_run)


def _batch_of(run_id: str) -> str | None:
    match = _BATCH_RUN_ID.match(run_id)
    return match.group(1) if match else None


@retry_transient
def _unfinished_batches(db: Database, cutoff: float) -> list[str]:
    with db.reader() as tx:
        return [row[0] for row in tx.fetchall("select_unfinished_batch_ids", {"cutoff": cutoff})]


def _candidates(db: Database, status: str, cutoff: float) -> Iterator[str]:
    """The ids of ``status`` runs finished before ``cutoff``, oldest first, a page at a time."""
    after: tuple[float, str] = (float("-inf"), "")
    while True:
        page = _page(db, status, cutoff, after)
        yield from (row[0] for row in page)
        if len(page) < PAGE:
            return
        after = (page[-1][1], page[-1][0])


@retry_transient
def _page(db: Database, status: str, cutoff: float, after: tuple[float, str]) -> list[tuple[str, float]]:
    params = {"status": status, "cutoff": cutoff, "after_created": after[0], "after_id": after[1], "limit": PAGE}
    with db.reader() as tx:
        return [(row[0], row[1]) for row in tx.fetchall("select_prunable_runs", params)]


@retry_transient
def _delete_run(db: Database, run_id: str, status: str, cutoff: float) -> int:
    """Delete one run and its rows; 0 when it is no longer finished (retried meanwhile)."""
    with db.transaction() as tx:
        if tx.execute("delete_finished_run", {"run_id": run_id, "status": status, "cutoff": cutoff}).rowcount != 1:
            return 0
        for statement in _CHILD_ROWS:
            tx.execute(statement, {"run_id": run_id})
    return 1


@retry_transient
def _delete_finished_batches(db: Database, cutoff: float) -> int:
    with db.transaction() as tx:
        return int(tx.execute("delete_finished_batches", {"cutoff": cutoff}).rowcount)


@retry_transient
def _count_finished_batches(db: Database, cutoff: float) -> int:
    with db.reader() as tx:
        return int(tx.fetchone("count_finished_batches", {"cutoff": cutoff})[0])


__all__ = ["PruneReport", "prune"]
