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
* Sessions the application named (``session_id=``) are not touched: a
  conversation outlives its runs. A run asked without one has a session of its
  own, keyed by its run id, holding its messages and working state; that goes
  with the run (from the SQL session store in this database), unless a run
  still in the store continues it.
"""

from __future__ import annotations

import heapq
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from lg_core.store._store_part import StorePart
from lg_core.store.database import Database
from lg_core.store.records import RUN_TERMINAL
from lg_core.store.transient_errors import retry_transient

PAGE = 200
_BATCH_RUN_ID = re.compile(r"^([^.:]+)[.:]")  # lg_scheduler.batch.run_id_for: <batch>.<item> or <batch>:<hash>
_CHILD_ROWS = (
    "delete_run_messages",
    "delete_run_frames",
    "delete_run_steps",
    "delete_run_events",
    "delete_run_interjections",
    "delete_own_session_messages",
    "delete_own_session",
)


Position = tuple[float, str]  # (created_at, id) of a run: where a pass stopped, oldest first


@dataclass(frozen=True)
class PruneReport:
    """What a prune deleted (or, for a dry run, would delete).

    ``resume_after``: set when a pass with a ``limit`` stopped before the end,
    the position of the last run it looked at; pass it as ``after`` to go on.
    """

    runs: int
    batches: int
    dry_run: bool = False
    resume_after: Position | None = None


def prune(
    db: Database,
    cutoff: float,
    statuses: Sequence[str] = RUN_TERMINAL,
    *,
    dry_run: bool = False,
    limit: int | None = None,
    after: Position | None = None,
) -> PruneReport:
    """Delete the finished runs in ``statuses`` that finished before ``cutoff`` (epoch seconds).

    Runs are taken oldest first (by creation, whatever their status), from just
    after ``after`` when given. ``limit`` bounds one pass: it looks at no more
    than that many old runs, deleting those it may and skipping those a batch
    keeps, then stops with ``resume_after`` set, so a caller with other work
    (the scheduler's recovery loop) takes a backlog of millions a slice at a
    time, and a slice of kept runs is not read again by the next one. Finished
    batches go with the pass that reaches the end.
    """
    kept_batches = set(_unfinished_batches(db, cutoff))
    count = examined = 0
    page = PAGE if limit is None else max(1, min(PAGE, limit + 1))  # one more tells whether the pass ended
    for created, run_id, status in _oldest_first(db, statuses, cutoff, after, page):
        if limit is not None and examined >= limit:
            return PruneReport(count, 0, dry_run, resume_after=after)
        examined, after = examined + 1, (created, run_id)
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


def _oldest_first(
    db: Database, statuses: Sequence[str], cutoff: float, after: Position | None, page: int
) -> Iterator[tuple[float, str, str]]:
    """``(created_at, id, status)`` of the runs to prune, oldest first across ``statuses``: one keyset
    stream per status (each an index range of lg_runs_status), merged as they are read."""
    return heapq.merge(*(_candidates(db, status, cutoff, after, page) for status in statuses))


def _candidates(
    db: Database, status: str, cutoff: float, after: Position | None, page: int
) -> Iterator[tuple[float, str, str]]:
    """The ``status`` runs finished before ``cutoff`` and created after ``after``, oldest first, a page at a time."""
    position = after if after is not None else (float("-inf"), "")
    while True:
        rows = _page(db, status, cutoff, position, page)
        yield from ((created, run_id, status) for run_id, created in rows)
        if len(rows) < page:
            return
        position = (rows[-1][1], rows[-1][0])


@retry_transient
def _page(db: Database, status: str, cutoff: float, after: Position, size: int) -> list[tuple[str, float]]:
    params = {"status": status, "cutoff": cutoff, "after_created": after[0], "after_id": after[1], "limit": size}
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


class RunRetention(StorePart):
    """RunStore's deletion of finished runs (:func:`prune`, on the store's database)."""

    @retry_transient
    def prune_runs(
        self,
        cutoff: float,
        statuses: Sequence[str] = RUN_TERMINAL,
        *,
        dry_run: bool = False,
        limit: int | None = None,
        after: Position | None = None,
    ) -> PruneReport:
        """Delete finished runs that finished before ``cutoff`` (epoch seconds), oldest first; ``limit``
        bounds one pass and ``after`` resumes one (see lg_core.store.retention)."""
        return prune(self.db, cutoff, statuses, dry_run=dry_run, limit=limit, after=after)


__all__ = ["Position", "PruneReport", "RunRetention", "prune"]
