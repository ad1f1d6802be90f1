"""lg_require(ok, reason): the guard of pipelined PostgreSQL transactions

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30 15:20:00

PostgreSQL only (see GUARD_FUNCTION_SQL in lg_core/store/schema.py); a SQLite
store has nothing to change.
"""

from __future__ import annotations

from alembic import op

from lg_core.store.schema import GUARD_FUNCTION_SQL

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(GUARD_FUNCTION_SQL)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP FUNCTION IF EXISTS lg_require(boolean, text)")
