"""Bringing a run store's schema up to date, with Alembic.

Opening a store migrates it: a new database gets the current schema directly
(``create_all``, then stamped with the latest revision, faster than replaying
history); an older one is upgraded step by step; one written by a newer
LittleGhost is refused instead of being half-understood. Several processes may
open the same store at once: PostgreSQL serializes them with an advisory lock,
SQLite with its write lock, and a loser of a ``CREATE TABLE`` race retries.

A store already at ``HEAD_REVISION`` is recognised by one read of its version
row, without importing Alembic (about half a second of a worker's start or an
``lg runs list``); Alembic is loaded only to create, stamp or upgrade a schema.

Developers add a revision after changing ``schema.py``::

    python -m lg_core.store.migrate revision "add a column for X"

and set ``HEAD_REVISION`` to it (tests/store/test_migrations.py checks they agree).
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, cast

from sqlalchemy import create_engine, inspect, text
from sqlalchemy.engine import Connection, Engine
from tenacity import Retrying, retry_if_exception, stop_after_attempt, wait_incrementing

from lg_core.errors import ConfigurationError
from lg_core.store.schema import metadata

if TYPE_CHECKING:
    import sqlite3

    from alembic.config import Config

VERSION_TABLE = "lg_alembic_version"
HEAD_REVISION = "0009"  # the newest revision in migrations/versions
_ADVISORY_LOCK = 0x6C67_7374  # "lgst"


def alembic_config(connection: Connection | None = None) -> Config:
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", "lg_core.store:migrations")
    if connection is not None:
        config.attributes["connection"] = connection
    return config


def head_revision() -> str:
    """The newest revision of the shipped migrations, as Alembic reads them."""
    from alembic.script import ScriptDirectory

    # None only for a script directory without revisions: the package ships its migrations.
    return cast(str, ScriptDirectory.from_config(alembic_config()).get_current_head())


def migrate(engine: Engine, *, in_memory: bool = False) -> None:
    if in_memory:
        metadata.create_all(engine)
        return
    if _stored_revision(engine) == HEAD_REVISION:
        return
    for attempt in Retrying(
        stop=stop_after_attempt(5),
        wait=wait_incrementing(start=0.05, increment=0.05),
        retry=retry_if_exception(_lost_a_race),
        reraise=True,
    ):
        with attempt, engine.begin() as connection:
            _migrate(connection)


def _stored_revision(engine: Engine) -> str | None:
    """The store's revision, read without Alembic; None when it has no version row yet.

    Read without the schema lock: a store at the head stays there (no opener downgrades
    it), and any other answer sends the caller through the locked migration.
    """
    with engine.begin() as connection:
        if not inspect(connection).has_table(VERSION_TABLE):
            return None
        return cast("str | None", connection.execute(text(f"SELECT version_num FROM {VERSION_TABLE}")).scalar())


def _lost_a_race(exc: BaseException) -> bool:
    """Whether another process opening the store at once made ``exc`` (worth trying again)."""
    if isinstance(exc, ConfigurationError):
        return False
    text_ = str(exc).lower()
    return any(m in text_ for m in ("already exists", "duplicate key", "locked"))


def _migrate(connection: Connection) -> None:
    from alembic import command
    from alembic.runtime.migration import MigrationContext
    from alembic.script import ScriptDirectory

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
    from alembic import command

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
