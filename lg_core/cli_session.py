"""What one ``lg`` command runs in: the global options, the Configuration and Runtime, and the
checks that keep a command from opening the wrong run store."""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import typer

from lg_core.cli_errors import UsageError
from lg_core.cli_imports import import_module, project_on_path
from lg_core.config import build_configuration, with_configuration
from lg_core.urls import safe_url


@dataclass
class GlobalOptions:
    """The options given before the command (``lg --store URL --import MODULE ...``)."""

    store: str | None = None
    imports: list[str] = field(default_factory=list)


StoreOption = Annotated[
    str | None,
    typer.Option(
        "--store",
        metavar="URL",
        help="Run store URL, e.g. sqlite:///runs.db (default: LG_RUN_STORE).",
    ),
]
ImportOption = Annotated[
    list[str] | None,
    typer.Option("--import", metavar="MODULE", help="Import MODULE first (repeatable); LG_IMPORTS adds more."),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]


@contextmanager
def session(
    ctx: typer.Context,
    store: str | None,
    imports: list[str] | None = None,
    *,
    durable: bool,
    load_imports: bool,
    before_open: Callable[[], Any] | None = None,
    **settings: Any,
) -> Iterator[Any]:
    """A Configuration (and its Runtime) for one command, current for the block and closed after it.

    ``settings`` are further Configuration values from the command's options
    (e.g. ``broker_url`` for ``lg worker --broker``); None means "not given".
    ``before_open`` runs once the imports are loaded and before the store is
    opened, so a command whose arguments are wrong (an agent that does not
    exist) fails without creating a store file.
    """
    options = ctx.find_object(GlobalOptions) or GlobalOptions()
    url = store or options.store
    given = {key: value for key, value in settings.items() if value is not None}
    config = build_configuration(**({"run_store": url} if url else {}), **given)
    origin = "--store" if url else _configured_store()
    if durable:
        require_durable_store(config.run_store, origin)
    else:  # a new run store may be created, but not inside another application's database
        refuse_foreign_sqlite_store(config.run_store, origin)
    if load_imports:
        project_on_path()
        for module in config.imports:
            try:
                import_module(module)
            except UsageError as exc:  # not on the command line: say where the name comes from
                raise UsageError(f"{exc}; it is named by {_configured_imports()}") from None
        for module in [*options.imports, *(imports or [])]:
            import_module(module)
    try:
        if before_open is not None:
            before_open()
        runtime = open_runtime(config)
        with with_configuration(config):
            yield runtime
    finally:
        config.close()


def _configured_imports() -> str:
    """Where the configuration's ``imports`` come from: the environment, else the config file."""
    from lg_core.config_sources import config_file_path

    if os.environ.get("LG_IMPORTS"):
        return "$LG_IMPORTS"
    path = config_file_path()
    return f"imports in {path}" if path is not None else "the configuration's imports"


def open_runtime(config: Any) -> Any:
    from sqlalchemy.exc import SQLAlchemyError

    from lg_core.store.transient_errors import driver_reason

    try:
        return config.runtime()
    except SQLAlchemyError as exc:
        config.close()
        raise UsageError(f"cannot open the run store {safe_url(config.run_store)}: {driver_reason(exc)}") from None


def _configured_store() -> str:
    """Where the configuration's ``run_store`` comes from, for a message about a bad one."""
    from lg_core.config_sources import config_file_path

    if os.environ.get("LG_RUN_STORE"):
        return "$LG_RUN_STORE"
    path = config_file_path()
    return f"run_store in {path}" if path is not None else "--store / LG_RUN_STORE"


def require_durable_store(url: str, origin: str = "--store / LG_RUN_STORE") -> None:
    """``lg runs`` reads a store another process wrote: refuse in-memory and missing SQLite files.

    ``origin`` says where ``url`` came from (``--store``, ``$LG_RUN_STORE``, a config file).
    """
    from lg_core.store.store_urls import parse_store_url

    parsed = parse_store_url(
        url, "{url!r} is not a database URL{reason} (from " + origin + "); use sqlite:///path/to/runs.db", UsageError
    )
    if parsed.get_backend_name() != "sqlite":
        return
    if parsed.database in (None, "", ":memory:"):
        raise UsageError(
            "no run store configured: runs live in a durable store; pass --store sqlite:///path/to/runs.db "
            "or postgresql+psycopg://USER@HOST/DB (or set LG_RUN_STORE) naming the store your runs were "
            "written to; for the local stack, `. .lg/stack/env` in the directory of `lg stack up` sets it"
        )
    if _store_file_stat(Path(parsed.database), origin) is None:
        raise UsageError(f"no run store at {parsed.database}: the file does not exist (check {origin})")
    refuse_foreign_sqlite_store(url, origin)


def _store_file_stat(path: Path, origin: str) -> os.stat_result | None:
    """The SQLite store file's status, None if it does not exist; a path the system refuses (a name
    longer than the file system allows, a directory that cannot be searched) is a UsageError."""
    try:
        return path.stat()
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        advice = "; choose a shorter path" if exc.errno == errno.ENAMETOOLONG else ""
        raise UsageError(
            f"cannot use the run store file {_short_path(path)} (from {origin}): {exc.strerror or exc}{advice}"
        ) from None


def _short_path(path: Path, limit: int = 120) -> str:
    """``path`` for a one-line message: a path thousands of characters long is cut in the middle."""
    text = str(path)
    if len(text) <= limit:
        return text
    return f"{text[: limit // 2]}...{text[-limit // 2 :]} ({len(text)} characters)"


def refuse_foreign_sqlite_store(url: str, origin: str) -> None:
    """Refuse a SQLite file that holds another database's tables (a typo in --store, most likely):
    opening it as a run store would add the store's tables to it. A new or empty file is fine.
    ``origin`` says where ``url`` came from."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError):
        return  # opening the store says what is wrong with the URL
    if parsed.get_backend_name() != "sqlite" or parsed.database in (None, "", ":memory:") or "uri" in parsed.query:
        return
    if _foreign_sqlite_database(Path(parsed.database), origin):
        raise UsageError(
            f"{parsed.database} is not a LittleGhost run store (it has tables, but no lg_runs); "
            f"check {origin}: opening it would add the run store's tables to it"
        )


def _foreign_sqlite_database(path: Path, origin: str) -> bool:
    """A SQLite database with tables but none of a run store's: most likely a typo in --store."""
    import sqlite3
    from contextlib import closing

    status = _store_file_stat(path, origin)
    if status is None or not stat.S_ISREG(status.st_mode) or status.st_size == 0:
        return False  # an empty file holds nobody's data; a directory is the store's own error
    try:
        with closing(sqlite3.connect(path)) as db:
            tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    except sqlite3.Error:
        return False  # not a database at all: opening the store says so
    return bool(tables) and "lg_runs" not in tables


__all__ = [
    "GlobalOptions",
    "ImportOption",
    "JsonOption",
    "StoreOption",
    "open_runtime",
    "refuse_foreign_sqlite_store",
    "require_durable_store",
    "session",
]
