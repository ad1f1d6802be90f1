"""a session id belongs to one actor

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-06 04:53:53.896148

Before this revision the same session id under two actors was two sessions. A
session now belongs to the actor whose write created it, and a unique index on
``lg_sessions.session_id`` keeps one owner per id even when two actors race to
create it. A store that holds one id under several actors cannot get the index
without choosing whose conversation keeps the id, which is the application's
decision, not the migration's: the upgrade stops, names those ids, and says how
to move the others aside; nothing is changed until it runs again.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from lg_core.errors import ConfigurationError

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

_SHOWN = 5  # shared session ids named in the error


def upgrade() -> None:
    _refuse_shared_session_ids()
    with op.batch_alter_table("lg_sessions", schema=None) as batch_op:
        batch_op.create_index("lg_sessions_owner", ["session_id"], unique=True)


def downgrade() -> None:
    with op.batch_alter_table("lg_sessions", schema=None) as batch_op:
        batch_op.drop_index("lg_sessions_owner")


def _refuse_shared_session_ids() -> None:
    """ConfigurationError naming the session ids stored under more than one actor, if any."""
    shared = (
        op.get_bind()
        .execute(
            sa.text("SELECT session_id FROM lg_sessions GROUP BY session_id HAVING COUNT(*) > 1 ORDER BY session_id")
        )
        .scalars()
        .all()
    )
    if not shared:
        return
    named = ", ".join(repr(session_id) for session_id in shared[:_SHOWN])
    more = f" and {len(shared) - _SHOWN} more" if len(shared) > _SHOWN else ""
    raise ConfigurationError(
        f"the run store cannot be upgraded: session ids {named}{more} each hold the conversations of several "
        "actors, and a session id now belongs to one actor. Give every actor but one its own id, in both "
        "tables (UPDATE lg_sessions SET session_id = 'NEW' WHERE session_id = 'OLD' AND actor_key = 'ACTOR'; "
        "the same for lg_session_messages; actor_key '' is no actor), then open the store again"
    )
