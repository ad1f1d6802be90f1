"""URLs in messages: a run-store or broker URL is shown without its password."""

from __future__ import annotations

import re


def safe_url(url: str) -> str:
    """``url`` with its password masked, for errors and logs (never raises).

    SQLAlchemy's renderer handles every database URL form; a URL it cannot
    parse (a Redis URL with odd parts, plain garbage) still loses any
    ``user:password@`` part before it is shown.
    """
    try:
        from sqlalchemy.engine import make_url

        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # noqa: BLE001 - only for messages
        return re.sub(r"//([^@/]*):[^@/]*@", r"//\1:***@", url)


__all__ = ["safe_url"]
