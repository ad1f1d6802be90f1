"""What a batch shows and writes: result lines (JSONL) and the progress bar.

Result lines are written in the order items *finish*, not input order, and
each is flushed as soon as it is known, so a crash loses none that were
reported and a reader can follow the file while the batch runs. Every line
carries the item's ``id`` and input ``line`` number; sort on ``line`` for
input order. The file is rewritten from the start by every submit of the
batch (results of items finished earlier are written from the run store), so
after a resumed batch it holds each item exactly once. A regular file is
replaced by a new one rather than truncated: a submitter taken over with
``--force`` may write a last line or two before it notices, and those go to
the file it had open, not into this submit's lines.

    {"id": "7", "line": 7, "run_id": "support-3f2a9c1d0e7b.7", "outcome": "completed",
     "response": "...", "error": null, "usage": {...}, "structured_result": null}

``structured_result`` is the validated result of an agent with a
``result_schema``. ``outcome`` is the run's outcome (completed, failed, partial, cancelled),
``invalid`` for a line skipped with ``--skip-invalid``, or ``not_started``
when starting the run failed (it is retried by the next submit; so is a run
whose resumption here failed, reported as ``failed``).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import IO, Any

from rich.console import Console, RenderableType
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    TaskProgressColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.text import Text

from lg_core.errors import InvocationError
from lg_core.store import RunRecord
from lg_core.store.records import RunOutcome
from lg_scheduler.batch_inputs import PROGRESS_LINES, ItemKey, shown_path
from lg_scheduler.batch_lines import BatchItem, InvalidLine


def run_result(item: BatchItem | ItemKey, record: RunRecord | RunOutcome) -> dict[str, Any]:
    """The result line of an item whose run finished."""
    error = record.error
    return {
        "id": item.id,
        "line": item.line,
        "run_id": record.id,
        "outcome": record.status,
        "response": record.response,
        "error": None
        if not error
        else {"class": error.get("name") or error.get("class"), "message": error.get("message")},
        "usage": record.usage,
        "structured_result": (record.result or {}).get("structured_result"),
    }


def invalid_result(invalid: InvalidLine) -> dict[str, Any]:
    return {
        "id": invalid.id if invalid.id is not None else str(invalid.line),
        "line": invalid.line,
        "run_id": None,
        "outcome": "invalid",
        "response": None,
        "error": {"class": invalid.error_class, "message": invalid.message},
        "usage": None,
        "structured_result": None,
    }


def error_result(
    item: BatchItem | ItemKey, run_id: str, error: BaseException, outcome: str = "not_started"
) -> dict[str, Any]:
    """An item the batch could not start (``not_started``) or not resume (``failed``); the next submit retries it."""
    return {
        "id": item.id,
        "line": item.line,
        "run_id": run_id,
        "outcome": outcome,
        "response": None,
        "error": {"class": type(error).__name__, "message": str(error)},
        "usage": None,
        "structured_result": None,
    }


def check_writable(out: str | os.PathLike[str] | None) -> Path | None:
    """Refuse an output path that cannot be written, before anything starts (nothing is created)."""
    if out is None:
        return None
    try:
        path = Path(out)
    except TypeError:  # pathlib's message names neither the argument nor what it takes
        raise InvocationError(
            f"out must be the path of the results file (a str or os.PathLike) or None, got {type(out).__name__}"
        ) from None
    try:
        return _writable(path)
    except OSError as exc:  # a name longer than the file system allows, a directory that cannot be searched
        raise InvocationError(f"cannot write {shown_path(path)}: {exc.strerror or exc}") from None


def _writable(path: Path) -> Path:
    if path.is_dir():
        raise InvocationError(f"output path {path} is a directory; pass a file name such as {path / 'results.jsonl'}")
    if path.exists():
        if not os.access(path, os.W_OK):
            raise InvocationError(f"output file {path} is not writable (permission denied)")
        return path
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise InvocationError(f"cannot write {path}: the directory {parent} does not exist")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise InvocationError(f"cannot write {path}: the directory {parent} is not writable (permission denied)")
    return path


def check_not_overwriting(out: Path, protected: list[Path]) -> None:
    """Refuse an output path that is one of ``protected`` (the input file, the run store's files).

    The writer truncates its file, so ``--out inputs.jsonl`` would destroy the
    batch's input and ``--out runs.db`` its store.
    """
    for path in protected:
        if _same_file(out, path):
            raise InvocationError(
                f"output path {out} is {path}, which the batch reads; write the results to another file"
            )


def _same_file(a: Path, b: Path) -> bool:
    if a.exists() and b.exists():
        return os.path.samefile(a, b)
    return a.resolve() == b.resolve()


class ResultWriteError(OSError):
    """The results file cannot be written (a full disk, a lost mount): the batch stops, resumable."""


class ResultWriter:
    """Result lines to a JSONL file (flushed per line), and kept for the BatchReport if ``keep``.

    Not keeping them is what bounds a large batch's memory: the file is the record.
    """

    def __init__(self, path: Path | None, keep: bool = True) -> None:
        self.path = path
        self.keep = keep
        self.results: list[dict[str, Any]] = []
        self._handle: IO[str] | None = None
        if path is not None:
            try:
                self._handle = _open_fresh(path)
            except OSError as exc:
                raise InvocationError(f"cannot write output file {path}: {exc.strerror or exc}") from None

    def write(self, result: dict[str, Any]) -> None:
        if self.keep:
            self.results.append(result)
        if self._handle is not None:
            try:
                self._handle.write(json.dumps(result, ensure_ascii=False, default=str) + "\n")
                self._handle.flush()
            except OSError as exc:
                self._abandon()
                raise ResultWriteError(f"cannot write the results to {self.path}: {exc.strerror or exc}") from None

    def close(self) -> None:
        if self._handle is not None:
            try:
                self._handle.close()
            except OSError as exc:  # its last lines could not be flushed
                raise ResultWriteError(f"cannot write the results to {self.path}: {exc.strerror or exc}") from None
            finally:
                self._handle = None

    def _abandon(self) -> None:
        """Close after a failed write; the unwritten line is dropped (the next submit rewrites the file)."""
        handle, self._handle = self._handle, None
        if handle is None:
            return
        try:
            handle.close()
        except OSError:
            pass


def _open_fresh(path: Path) -> IO[str]:
    """A new, empty file at ``path``: a regular file there is replaced, not truncated.

    Anything else (a device such as /dev/full, a FIFO, a symlink) is opened as
    given, and so is a file in a directory where no new file can be made.
    """
    if path.is_symlink() or not path.is_file():
        return path.open("w", encoding="utf-8")
    fresh = path.with_name(f".{path.name}.{os.getpid()}-{secrets.token_hex(4)}")
    try:
        handle = fresh.open("x", encoding="utf-8")
    except OSError:
        return path.open("w", encoding="utf-8")
    try:
        shutil.copymode(path, fresh)
        os.replace(fresh, path)
    except OSError:
        handle.close()
        fresh.unlink(missing_ok=True)
        return path.open("w", encoding="utf-8")
    return handle


class BatchProgress:
    """A rich progress bar on stderr: a line of counts (completed, failed, invalid, in flight)
    above the bar, finished/total and the times.

    One line of all of them is wider than an 80-column terminal, where rich cuts the columns
    down to "…". The counts are text that wraps onto more lines instead, and a terminal too
    narrow for the times drops them, so the bar and finished/total always fit.
    """

    def __init__(self, enabled: bool, batch_id: str, total: int, console: Console | None = None) -> None:
        self._progress: Progress | None = None
        console = console or Console(stderr=True)
        if not (enabled and console.is_terminal):
            return  # a bar needs a terminal; piped output gets the caller's summary instead
        self._progress = _CountsAboveBar(*_columns_for(console.width), console=console)
        self._task = self._progress.add_task(f"batch {batch_id}", total=total, ok=0, failed=0, invalid=0, running=0)
        self._progress.start()

    def update(self, counts: dict[str, int]) -> None:
        if self._progress is None:
            return
        done = counts["completed"] + counts["failed"] + counts["invalid"]
        # The bar's own ``completed`` is every finished item; ``ok`` counts completed runs.
        fields: dict[str, Any] = {k: counts[k] for k in ("failed", "invalid", "running")}
        self._progress.update(self._task, completed=done, ok=counts["completed"], **fields)

    def close(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None


TIMES_MIN_WIDTH = 50  # bar, "123456/500000", elapsed and remaining time side by side
BAR_MIN_WIDTH = 30  # a bar next to "123456/500000"


def _columns_for(width: int) -> list[ProgressColumn]:
    """The bar line's columns that fit ``width``: finished/total always, the bar and times when there is room."""
    columns: list[ProgressColumn] = [BarColumn(bar_width=None)] if width >= BAR_MIN_WIDTH else []
    columns.append(MofNCompleteColumn())
    if width >= TIMES_MIN_WIDTH:
        columns += [TimeElapsedColumn(), TimeRemainingColumn()]
    return columns


class _CountsAboveBar(Progress):
    """A Progress that shows each task's counts as a wrapping line of text above its bar."""

    def get_renderables(self) -> Iterable[RenderableType]:
        for task in self.tasks:
            fields = task.fields
            yield Text.from_markup(
                f"[bold]{escape(task.description)}[/]: [green]{fields['ok']} completed[/], "
                f"[red]{fields['failed']} failed[/], [yellow]{fields['invalid']} invalid[/], "
                f"[cyan]{fields['running']} in flight[/]"
            )
        yield self.make_tasks_table(self.tasks)


class ScanProgress:
    """A bar on stderr for what precedes the batch's own bar: checking the file, looking up runs.

    Checking takes a while for a large file (every line is validated like a
    start_execution call: about a minute for 500,000 lines), so the bar shows the
    bytes read out of the file's size and the lines so far. A pipe has no size:
    its bar has no total, and shows the lines read. A resubmit then looks up
    every item's run and writes the results of finished ones. It is called
    ``(total, done, count)`` (read_inputs' ``on_progress``), and appears only
    once PROGRESS_LINES were counted (a small file shows none).
    """

    def __init__(self, enabled: bool, description: str, unit: str = "lines", console: Console | None = None) -> None:
        self._progress: Progress | None = None
        self._console = console or Console(stderr=True)
        self._enabled = enabled and self._console.is_terminal
        self._description = description
        self._unit = unit

    def __call__(self, size: int | None, read: int, lines: int) -> None:
        if self._progress is None and self._enabled and lines >= PROGRESS_LINES:
            self._start(size, read, lines)
        elif self._progress is not None:
            self._progress.update(self._task, completed=read, lines=lines)

    def _start(self, size: int | None, read: int, lines: int) -> None:
        self._progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            TaskProgressColumn(),  # of the file's bytes; blank for a pipe
            TextColumn(f"{{task.fields[lines]:,}} {self._unit}"),
            TimeElapsedColumn(),
            console=self._console,
            transient=True,  # gone once checked: the batch's start line and bar follow
        )
        self._task = self._progress.add_task(escape(self._description), total=size, completed=read, lines=lines)
        self._progress.start()

    def close(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None


__all__ = [
    "BatchProgress",
    "ResultWriteError",
    "ScanProgress",
    "ResultWriter",
    "check_writable",
    "error_result",
    "invalid_result",
    "run_result",
]
