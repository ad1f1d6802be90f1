"""Bringing a run store's schema up to date, with Alembic.

Opening a store migrates it: a new database gets the current schema directly
(``create_all``, then stamped with the latest revision, faster than replaying
history); an older one is upgraded step by step; one written by a newer
LittleGhost is refused instead of being half-understood. Several processes may
open the same store at once: PostgreSQL serializes them with an advisory lock,
SQLite with its write lock, and a loser of a ``CREATE TABLE`` race retries.

Developers add a revision after changing ``schema.py``::

    python -m lg_core.store.migrate revision "add a column for X"
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, cast

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import create_engine, inspect, text
from sqlalchemy.engine import Connection, Engine
from tenacity import Retrying, retry_if_exception, stop_after_attempt, wait_incrementing

from lg_core.errors import ConfigurationError
from lg_core.store.schema import metadata

if TYPE_CHECKING:
    import sqlite3

VERSION_TABLE = "lg_alembic_version"
_ADVISORY_LOCK = 0x6C67_7374  # "lgst"


def alembic_config(connection: Connection | None = None) -> Config:
    config = Config()
    config.set_main_option("script_location", "lg_core.store:migrations")
    if connection is not None:
        config.attributes["connection"] = connection
    return config


def head_revision() -> str:
    # None only for a script directory without revisions: the package ships its migrations.
    return cast(str, ScriptDirectory.from_config(alembic_config()).get_current_head())


def migrate(engine: Engine, *, in_memory: bool = False) -> None:
    if in_memory:
        metadata.create_all(engine)
        return
    for attempt in Retrying(
        stop=stop_after_attempt(5),
        wait=wait_incrementing(start=0.05, increment=0.05),
        retry=retry_if_exception(_lost_a_race),
        reraise=True,
    ):
        with attempt, engine.begin() as connection:
            _migrate(connection)


def _lost_a_race(exc: BaseException) -> bool:
    """Whether another process opening the store at once made ``exc`` (worth trying again)."""
    if isinstance(exc, ConfigurationError):
        return False
    text_ = str(exc).lower()
    return any(m in text_ for m in ("already exists", "duplicate key", "locked"))


def _migrate(connection: Connection) -> None:
    _lock_schema(connection)
    current = MigrationContext.configure(connection, opts={"version_table": VERSION_TABLE}).get_current_revision()
    config = alembic_config(connection)
    script = ScriptDirectory.from_config(config)
    if current is None:
        if "lg_runs" in inspect(connection).get_table_names():
            raise ConfigurationError(
                "the run store has LittleGhost tables but no migration history (it predates "
                "migrations); move it aside and let LittleGhost create a new one"
            )
        metadata.create_all(connection)
        command.stamp(config, "head")
        return
    if current not in {rev.revision for rev in script.walk_revisions()}:
        raise ConfigurationError(
            f"the run store was written by a newer LittleGhost (schema revision {current}); upgrade littleghost"
        )
    if current != script.get_current_head():
        command.upgrade(config, "head")


def _lock_schema(connection: Connection) -> None:
    """Hold the store's schema lock until the migration commits.

    PostgreSQL: an advisory lock. SQLite: the store's connections run in the
    driver's autocommit mode (LittleGhost issues its own BEGIN), so without an
    explicit ``BEGIN IMMEDIATE`` each ``CREATE TABLE`` would commit on its own
    and a concurrent opener could see the tables before the version stamp.
    """
    if connection.dialect.name == "postgresql":
        connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _ADVISORY_LOCK})
    elif not cast("sqlite3.Connection", connection.connection.driver_connection).in_transaction:
        connection.exec_driver_sql("BEGIN IMMEDIATE")


def _new_revision(message: str) -> None:
    """Autogenerate a revision from the difference between schema.py and the migrations."""
    with tempfile.TemporaryDirectory() as directory:
        engine = create_engine(f"sqlite:///{Path(directory) / 'scratch.db'}")
        with engine.begin() as connection:
            config = alembic_config(connection)
            command.upgrade(config, "head")
            command.revision(config, message=message, autogenerate=True)
        engine.dispose()


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] != "revision":
        sys.exit('usage: python -m lg_core.store.migrate revision "what changed"')
    _new_revision(sys.argv[2])
