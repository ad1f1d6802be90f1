"""steps count their relay sends

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01 19:57:17.176470

The outbox relay backs off per step (lg_core.store.resend_backoff): a step's
``relays`` is how many times the relay sent it since it last entered the outbox
or was claimed. Existing rows start at 0, as if never relayed. On PostgreSQL the
column's constant default is stored in the catalog (no table rewrite); on SQLite
it is a plain ALTER TABLE ADD COLUMN (the table is not rebuilt).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("lg_steps", schema=None) as batch_op:
        batch_op.add_column(sa.Column("relays", sa.Integer(), server_default="0", nullable=False))


def downgrade() -> None:
    with op.batch_alter_table("lg_steps", schema=None) as batch_op:
        batch_op.drop_column("relays")
