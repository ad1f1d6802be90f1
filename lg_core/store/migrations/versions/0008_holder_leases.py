"""a process holding code-mode programs keeps a lease of its own

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-06 17:00:00.000000

A code-mode program lives in the worker process that started it, and its
``wait`` is sent to that process's own queue. Whether that process is still
alive must be known from any host, so while it holds programs it renews a row
of ``lg_holder_leases`` (its holder string and a lease by the store's clock).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "lg_holder_leases",
        sa.Column("holder", sa.String(length=200), nullable=False),
        sa.Column("lease_until", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("holder"),
        sqlite_with_rowid=False,
    )


def downgrade() -> None:
    op.drop_table("lg_holder_leases")
