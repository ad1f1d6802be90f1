"""a child run names the step of its parent run that waits for it

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-06 16:10:00.000000

A step may run another assembly as a child run (a Graph node's Agent) and park
until it ends, holding no worker. The child's row names that step
(``parent_run_id`` and the new ``parent_step_key``), so the commit that ends the
child wakes the parked step in the same transaction; the index finds a parent's
children, whose cancel follows the parent's ending. Existing runs have no parent
step.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("lg_runs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("parent_step_key", sa.String(length=300), nullable=True))
        batch_op.create_index("lg_runs_parent", ["parent_run_id"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("lg_runs", schema=None) as batch_op:
        batch_op.drop_index("lg_runs_parent")
        batch_op.drop_column("parent_step_key")
