"""Alembic environment for the run store.

Migrations run programmatically (``lg_core.store.migrate``) on the connection
the store opened; there is no alembic.ini. The version table is
``lg_alembic_version`` so an application's own Alembic history is untouched.
"""

from __future__ import annotations

from alembic import context

from lg_core.store.schema import metadata

VERSION_TABLE = "lg_alembic_version"


def run_migrations_online() -> None:
    connection = context.config.attributes["connection"]
    context.configure(
        connection=connection,
        target_metadata=metadata,
        version_table=VERSION_TABLE,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


if context.is_offline_mode():
    raise RuntimeError("the run store's migrations run online only")
run_migrations_online()
