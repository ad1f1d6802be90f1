"""a parked step may carry the time the scheduler wakes it

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-06 19:40:00.000000

A subagent wait parks its step (no worker held) until a child turn ends or its
long-poll duration passes. Nothing ends at that time to wake it, so the step row
holds ``wake_at`` and the scheduler puts parked steps whose time has passed back
in the outbox; the partial index holds only the steps with a timer.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("lg_steps", schema=None) as batch_op:
        batch_op.add_column(sa.Column("wake_at", sa.Float(), nullable=True))
    op.create_index(
        "lg_steps_wake_at",
        "lg_steps",
        ["wake_at"],
        unique=False,
        sqlite_where=sa.text("wake_at IS NOT NULL"),
        postgresql_where=sa.text("wake_at IS NOT NULL"),
    )


def downgrade() -> None:
    op.drop_index("lg_steps_wake_at", table_name="lg_steps")
    with op.batch_alter_table("lg_steps", schema=None) as batch_op:
        batch_op.drop_column("wake_at")
