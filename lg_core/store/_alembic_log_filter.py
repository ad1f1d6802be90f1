"""Keep Alembic's set-up lines out of every process's log.

Every process (web app, worker, scheduler, CLI) opens the run store and so
loads and configures Alembic, which logs nine INFO lines each time ("setup
plugin ...", "Context impl ...", "Will assume ... DDL") that say nothing at a
worker's INFO level. A real stamp or upgrade of the schema still logs. The
filters must be in place before ``alembic`` is first imported (its plugins log
on import), so the store package imports this module first.
"""

from __future__ import annotations

import logging

CHATTER = ("setup plugin ", "Context impl ", "Will assume ")


def is_news(record: logging.LogRecord) -> bool:
    """False for Alembic's set-up chatter, True for anything else."""
    return not str(record.msg).startswith(CHATTER)


for _name in ("alembic.runtime.plugins", "alembic.runtime.migration"):
    logging.getLogger(_name).addFilter(is_news)
