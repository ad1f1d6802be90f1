"""Store URLs: parsing them, the dialects a run store accepts, and SQLite file paths.

A wrong URL is a ConfigurationError that names the URL (password hidden) and
what to write instead, raised when the runtime is built rather than from the
first statement a run sends.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from lg_core.errors import ConfigurationError
from lg_core.urls import safe_url


def parse_store_url(url: str, message: str, error: type[Exception] = ConfigurationError) -> Any:
    """``url`` parsed by SQLAlchemy, else ``error(message)``.

    ``message`` is formatted with ``url`` (its password hidden) and ``reason``:
    SQLAlchemy refuses a URL it cannot split with ArgumentError, but a port that
    is not a number (``host:abc``, an unclosed ``[::1``) escapes as ValueError.
    """
    try:
        return make_url(url)
    except ArgumentError:
        reason = ""
    except ValueError:
        reason = " (its port is not a number)"
    raise error(message.format(url=safe_url(url), reason=reason)) from None


def unsupported_store(url: str, dialect: str) -> str:
    """Why ``url`` cannot be a run store, with the URL to write instead."""
    if dialect == "postgres":  # Heroku-style URLs: SQLAlchemy knows only the postgresql scheme
        return (
            f"run_store {safe_url(url)} uses the scheme postgres://, which SQLAlchemy does not accept; "
            "write it as postgresql+psycopg://user@host/db"
        )
    return (
        f"run_store supports SQLite and PostgreSQL, got {dialect!r} ({safe_url(url)}); use "
        "'sqlite:///path/to/runs.db' or 'postgresql+psycopg://user@host/db'"
    )


def expand_sqlite_home(url: str) -> str:
    """``url`` with a ``~`` (or ``~user``) at the start of its SQLite file path expanded, as a shell
    would: SQLite itself opens ``~/runs.db`` as a directory named ``~``. Any other URL is returned as is
    (a ``?uri=true`` path is SQLite's own to read)."""
    import os

    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError):
        return url  # not a URL: whoever opens it says so
    database = parsed.database
    if parsed.get_backend_name() != "sqlite" or not database or not database.startswith("~") or "uri" in parsed.query:
        return url
    expanded = os.path.expanduser(database)
    return url if expanded == database else parsed.set(database=expanded).render_as_string(hide_password=False)


def check_sqlite_path(url: str, database: str) -> str:
    """A SQLite file store in a missing directory (or at a directory) is a ConfigurationError that
    says so, not SQLite's "unable to open database file" when the first connection opens.

    Returns the URL for SQLite to open: ``url`` with ``~`` expanded, the path checked here."""
    from pathlib import Path

    path = Path(database).expanduser()
    if path.is_dir():
        raise ConfigurationError(
            f"cannot open the run store {url}: {path} is a directory; "
            f"name a file in it, e.g. sqlite:///{path / 'runs.db'}"
        )
    if not path.parent.is_dir():
        raise ConfigurationError(
            f"cannot open the run store {url}: the directory {path.parent} does not exist; create it "
            "(SQLite creates only the file) or fix the path"
        )
    return expand_sqlite_home(url)


__all__ = ["check_sqlite_path", "expand_sqlite_home", "parse_store_url", "unsupported_store"]
