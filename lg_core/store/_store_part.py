"""What every part of RunStore works with, declared once for the parts' type checks."""

from __future__ import annotations

from lg_core.store.database import Database


class StorePart:
    """The attributes RunStore.__init__ sets, which every store part's methods read.

    ``db`` runs the transactions; ``url`` names the store in errors; ``relay_grace``
    is how long a scheduled step waits before the outbox relay sends it;
    ``relay_backoff_max`` is the longest a step's re-send back-off grows
    (lg_core.store.resend_backoff).
    """

    db: Database
    url: str
    relay_grace: float
    relay_backoff_max: float


__all__ = ["StorePart"]
