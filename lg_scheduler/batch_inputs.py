"""Reading and validating a batch's JSONL input file, all of it, before anything starts.

Each non-blank line is one invocation of the batch's agent:

    "Where is order 481?"
    {"message": "Where is order 481?", "id": "order-481", "context": {"account_id": "a-2"},
     "actor_id": "user-7", "session_id": "s-1", "settings": {}, "metadata": {}, "deadline": 60}

An object takes ``message`` (required) plus the invocation fields ``context``,
``actor_id``, ``session_id``, ``settings``, ``metadata``, ``history``,
``deadline`` (seconds from the run's start) or ``deadline_at`` (ISO 8601),
and optionally ``id``, the item's id (a string or an integer; default: the
line number). Unknown fields are refused, so a typo such as ``"mesage"`` is
caught instead of silently dropped; ``run_id`` is refused because the batch
derives it from the item id.

Every line is checked the way ``Agent.start_execution`` would check it (the
invocation is built and the agent's model resolved; :mod:`lg_scheduler.batch_lines`),
so a batch either starts with every item valid or reports each bad line with its number.

A line may be at most ``max_line_bytes`` long (1 MiB by default; ``--max-line-bytes``):
a longer one is that line's error, read past in pieces without being held, so a
file with no newline at all (``/dev/zero``) costs bounded memory. What a message
about a line quotes of its content is a short escaped excerpt
(:func:`~lg_scheduler.batch_lines.excerpt`), and a message is cut to MAX_MESSAGE_CHARS, so neither the
terminal nor the results file receives a line's text.

Memory: the file is read line by line, never whole. What stays in memory is
where each valid line starts (12 bytes a line) and the invalid lines' reasons;
an item's text is read again from the file when the batch needs it
(:meth:`BatchInputs.item`), so a file of 500,000 long lines costs a few
megabytes, not its size. Checking ids for duplicates holds, during the scan
only, each id the file gives (a line without one costs a bit). The file
stays open while the batch runs, so a file replaced (renamed over) meanwhile
does not change the batch; one whose content changes in place stops it with
an InvocationError. A file that cannot be read twice (a pipe,
``<(generate)``) is copied to a temporary file as it is scanned. A byte order
mark starting a line is dropped.
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
from array import array
from collections.abc import Callable, Iterator
from pathlib import Path
from types import TracebackType
from typing import IO, Any, NamedTuple

from lg_core.errors import InvocationError
from lg_scheduler.batch_lines import (
    EXCERPT_CHARS,
    BatchItem,
    IdClaims,
    InvalidLine,
    InvalidLineError,
    check_line,
    decode_line,
    excerpt,
    parsed_item,
)

DEFAULT_MAX_LINE_BYTES = 1 << 20
MAX_LINE_LIMIT = 1 << 30
READ_BUFFER = 1 << 18  # items are read back in file order, mostly from this buffer
PROGRESS_LINES = 1000  # how often the scan reports its progress
ScanCallback = Callable[[int | None, int, int], Any]  # (file size or None, bytes read, lines read)


class ItemKey(NamedTuple):
    """What a batch keeps of an item it is not starting right now: where it is and its id."""

    position: int  # among the valid items, in file order (BatchInputs.item reads it)
    line: int
    id: str


class BatchInputs:
    """A scanned input file: its digest, where its valid lines start, and its invalid lines.

    Items are read back from the open file on demand (:meth:`items`, :meth:`item`);
    close it when the batch is done (``with read_inputs(...) as inputs:``).
    """

    def __init__(
        self,
        path: Path,
        handle: IO[bytes],
        digest: str,
        invalid: list[InvalidLine],
        offsets: array[int],
        lines: array[int],
        stamp: tuple[int, int] | None = None,
        *,
        max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
        handle_digest: str | None = None,
    ) -> None:
        self.path = path
        self.digest = digest  # sha256 of the file's bytes
        self.invalid = invalid
        self.max_line_bytes = max_line_bytes
        self._handle = handle
        # A spool leaves over-long lines out, so its own bytes hash to another digest than the file's.
        self._handle_digest = handle_digest or digest
        self._offsets = offsets  # byte offset of each valid line, in file order
        self._lines = lines  # its line number
        self._stamp = stamp or _stamp(handle)  # a spool's own stamp is taken once it is written

    @property
    def total(self) -> int:
        """Every non-blank line: the valid items and the invalid lines."""
        return len(self._offsets) + len(self.invalid)

    def __len__(self) -> int:
        """The number of valid items."""
        return len(self._offsets)

    def item(self, index: int) -> BatchItem:
        """The ``index``-th valid item (0-based, in file order), read from the file."""
        self._handle.seek(self._offsets[index])
        raw = self._handle.readline(self.max_line_bytes + 1)  # a line edited in place to be longer is cut: changed
        self._check_unchanged()  # after the read: an edit the line was read from has changed the stamp
        number = self._lines[index]
        try:
            return parsed_item(number, decode_line(raw))
        except (InvalidLineError, KeyError):
            raise self._changed_error() from None

    def items(self) -> Iterator[BatchItem]:
        """Every valid item in file order, read one at a time."""
        for index in range(len(self._offsets)):
            yield self.item(index)

    def keys(self) -> Iterator[ItemKey]:
        """Every valid item's key in file order (each line is read, and only its id kept)."""
        for index, item in enumerate(self.items()):
            yield ItemKey(index, item.line, item.id)

    def close(self) -> None:
        self._handle.close()

    def __enter__(self) -> BatchInputs:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def _check_unchanged(self) -> None:
        """Stop at an edit in place; a file only touched (its content the same) carries on.

        A new stamp is kept only once the bytes on disk hash to the digest and
        nothing wrote to the file meanwhile; else the next item looks again.
        """
        stamp = _stamp(self._handle)
        if stamp == self._stamp:
            return
        if self._content_digest() != self._handle_digest:
            raise self._changed_error()
        if _stamp(self._handle) == stamp:
            self._stamp = stamp

    def _content_digest(self) -> str:
        """The sha256 of the open file's bytes on disk now.

        Read with ``os.pread`` on its descriptor: the handle's buffer may hold bytes
        from before an edit. The descriptor, not the path: a file renamed over this
        one is not the batch's input.
        """
        digest = hashlib.sha256()
        descriptor, offset = self._handle.fileno(), 0
        while chunk := os.pread(descriptor, READ_BUFFER, offset):
            digest.update(chunk)
            offset += len(chunk)
        return digest.hexdigest()

    def _changed_error(self) -> InvocationError:
        return InvocationError(
            f"input file {self.path} was changed while the batch ran; the batch stopped (what finished is kept "
            "in the run store): restore the file and submit again to resume, or submit the new file as a new batch"
        )


def _stamp(handle: IO[bytes]) -> tuple[int, int]:
    """Size and modification time of the open file: an edit in place changes them."""
    info = os.fstat(handle.fileno())
    return info.st_size, info.st_mtime_ns


class BatchInputError(InvocationError):
    """The input file has invalid lines; ``problems`` lists them (nothing was submitted).

    ``batch_id`` names the batch this file already started with them skipped
    (``skip_invalid``), which only ``skip_invalid`` resumes; None for a new batch.
    """

    problems: list[InvalidLine]
    batch_id: str | None = None


def input_path(value: Any) -> Path:
    """``value`` as a Path, or an InvocationError naming the argument (pathlib's TypeError names neither)."""
    try:
        return Path(value)
    except TypeError:
        raise InvocationError(
            f"inputs_path must be the path of a JSONL file (a str or os.PathLike), got {type(value).__name__}"
        ) from None


def open_input(path: str | os.PathLike[str]) -> tuple[Path, IO[bytes]]:
    """The input file, open for reading, or an InvocationError naming what is wrong with the path."""
    path = input_path(path)
    try:
        if not path.exists():
            raise InvocationError(f"input file {path} does not exist")
        if path.is_dir():
            raise InvocationError(f"input file {path} is a directory; pass a JSONL file with one input per line")
        return path, path.open("rb", buffering=READ_BUFFER)
    except OSError as exc:  # a name longer than the file system allows, a directory that cannot be searched
        raise InvocationError(f"cannot read input file {shown_path(path)}: {exc.strerror or exc}") from None


def shown_path(path: Path, limit: int = 120) -> str:
    """``path`` for a one-line message: one thousands of characters long is cut in the middle."""
    text = str(path)
    if len(text) <= limit:
        return text
    return f"{text[: limit // 2]}...{text[-limit // 2 :]} ({len(text)} characters)"


def read_inputs(
    path: str | os.PathLike[str],
    agent_cls: type,
    resolver: Any,
    on_progress: ScanCallback | None = None,
    *,
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
) -> BatchInputs:
    """Parse and validate every line of ``path`` for ``agent_cls`` (models resolved with ``resolver``).

    The returned inputs keep the file open: close them (or use ``with``).
    ``on_progress(size, read, lines)`` is called every PROGRESS_LINES lines and
    at the end, ``size`` being the file's size (None for a pipe). A line longer
    than ``max_line_bytes`` (its newline not counted) is an invalid line.
    """
    max_line_bytes = check_max_line_bytes(max_line_bytes)
    path, source = open_input(path)
    spool = None if source.seekable() else tempfile.TemporaryFile(prefix="lg-batch-inputs-")
    try:
        stamp = _stamp(source) if spool is None else None  # before reading: an edit during the scan shows later
        scan = _Scan(agent_cls, resolver, on_progress, None if stamp is None else stamp[0], max_line_bytes)
        scan.read(path, source, spool)
        if spool is not None:
            source.close()
            spool.flush()
        if scan.total == 0:
            raise InvocationError(
                f"input file {path} has no inputs: every line is blank (expected one JSON value per line)"
            )
    except BaseException:
        source.close()
        if spool is not None:
            spool.close()
        raise
    handle = source if spool is None else spool
    return BatchInputs(
        path,
        handle,
        scan.digest.hexdigest(),
        scan.invalid,
        scan.offsets,
        scan.lines,
        stamp,
        max_line_bytes=max_line_bytes,
        handle_digest=None if scan.spooled is None else scan.spooled.hexdigest(),
    )


def check_max_line_bytes(value: Any) -> int:
    """``value`` as a line limit in bytes: an integer, or text such as ``4MiB``; InvocationError otherwise."""
    size = parse_size(value) if isinstance(value, str) else value
    if isinstance(size, bool) or not isinstance(size, int) or not 1 <= size <= MAX_LINE_LIMIT:
        raise InvocationError(
            "max_line_bytes (--max-line-bytes) must be a size from 1 byte to 1GiB (e.g. 1048576 or 4MiB), "
            f"got {excerpt(str(value), 40)}"
        )
    return size


_SIZE_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kib": 1 << 10, "m": 1 << 20, "mib": 1 << 20, "g": 1 << 30, "gib": 1 << 30}
_SIZE = re.compile(r"\s*(\d{1,12})\s*([a-z]*)\s*")


def parse_size(text: str) -> int | None:
    """``"4MiB"`` -> 4194304 (K, M and G are powers of 1024, as in KiB); None for anything else."""
    match = _SIZE.fullmatch(text.lower())
    if match is None or match.group(2) not in _SIZE_UNITS:
        return None
    return int(match.group(1)) * _SIZE_UNITS[match.group(2)]


class _Scan:
    """One pass over the file: hash it, validate each line, remember where the valid ones start."""

    def __init__(
        self, agent_cls: type, resolver: Any, on_progress: ScanCallback | None, size: int | None, max_line_bytes: int
    ) -> None:
        self.agent_cls = agent_cls
        self.resolver = resolver
        self.on_progress = on_progress
        self.size = size
        self.max_line_bytes = max_line_bytes
        self.digest = hashlib.sha256()
        self.spooled: Any = None  # the spool's own sha256, when there is one
        self.offsets: array[int] = array("Q")
        self.lines: array[int] = array("I")
        self.invalid: list[InvalidLine] = []
        self.ids = IdClaims()

    @property
    def total(self) -> int:
        return len(self.offsets) + len(self.invalid)

    def read(self, path: Path, source: IO[bytes], spool: IO[bytes] | None) -> None:
        """Scan ``source``, copying it to ``spool`` if given (a pipe, which cannot be read twice).

        An over-long line is copied to the spool as an empty line: it is never read
        back, and a pipe with no newline must not fill the disk either.
        """
        offset = position = number = 0  # bytes read from source; where the next line starts in the handle kept
        if spool is not None:
            self.spooled = hashlib.sha256()
        try:
            while (line := _read_line(source, self.max_line_bytes, self.digest.update)) is not None:
                number += 1
                start, offset = position, offset + line.length
                if spool is not None:
                    kept = b"\n" if line.over_long else line.head
                    spool.write(kept)
                    self.spooled.update(kept)
                    position += len(kept)
                else:
                    position = offset
                if line.over_long:
                    self.invalid.append(_over_long(number, line, self.max_line_bytes))
                elif line.head.strip():
                    self._line(number, start, line.head)
                if self.on_progress is not None and number % PROGRESS_LINES == 0:
                    self.on_progress(self.size, offset, number)
        except OSError as exc:
            raise InvocationError(f"cannot read input file {path}: {exc.strerror or exc}") from None
        if self.on_progress is not None:
            self.on_progress(self.size, offset, number)

    def _line(self, number: int, start: int, raw: bytes) -> None:
        problem = check_line(number, raw, self.ids, self.agent_cls, self.resolver)
        if problem is None:
            self.offsets.append(start)
            self.lines.append(number)
        else:
            self.invalid.append(problem)


class _Line(NamedTuple):
    """A line as the scan read it: whole, or only its head when it is over the limit."""

    head: bytes  # the line with its newline, or its first limit + 1 bytes
    length: int  # every byte of it, the newline included
    over_long: bool

    @property
    def text_length(self) -> int:
        """Its length without the newline."""
        return self.length - 1 if self.length > len(self.head) or self.head.endswith(b"\n") else self.length


def _read_line(source: IO[bytes], limit: int, consume: Callable[[bytes], Any]) -> _Line | None:
    """The next line of ``source``, None at its end.

    A line longer than ``limit`` (its newline not counted) comes back as its first
    ``limit + 1`` bytes with its whole length: the rest is read in READ_BUFFER
    pieces and dropped, so its size costs time, not memory. Every byte read is
    passed to ``consume`` (the file's digest).
    """
    raw = source.readline(limit + 1)
    if not raw:
        return None
    consume(raw)
    if len(raw) <= limit or raw.endswith(b"\n"):
        return _Line(raw, len(raw), False)
    length = len(raw)
    while piece := source.readline(READ_BUFFER):
        consume(piece)
        length += len(piece)
        if piece.endswith(b"\n"):
            break
    return _Line(raw, length, True)


def _over_long(number: int, line: _Line, limit: int) -> InvalidLine:
    text = line.head[:EXCERPT_CHARS].decode("utf-8", errors="replace")
    return InvalidLine(
        number,
        None,
        "InvocationError",
        f"the line is {line.text_length:,} bytes long, over the limit of {limit:,} (--max-line-bytes / "
        f"max_line_bytes raises it); it starts with {excerpt(text)}",
    )


__all__ = [
    "DEFAULT_MAX_LINE_BYTES",
    "BatchInputError",
    "BatchInputs",
    "ItemKey",
    "check_max_line_bytes",
    "open_input",
    "parse_size",
    "read_inputs",
    "shown_path",
]
