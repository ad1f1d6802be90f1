"""Keep psycopg's "error ignored terminating <Pipeline>" warning out of every log.

A step's commit to PostgreSQL is one pipeline, and a commit that loses a race
to another (the tool calls of one turn finishing together) fails inside it on
purpose: the server skips the rest of the pipeline, and the store rolls back
and tries again. psycopg then logs a WARNING, "error ignored terminating
<psycopg.Pipeline [INERROR] ...>: pipeline aborted", for the skipped rest,
while the error that aborted the pipeline is raised to the store as usual. A
process without logging set up prints it on stderr (Python's last-resort
handler), once per lost race: a turn of 5 parallel tool calls printed about 5.
Only that warning about an aborted pipeline is dropped; psycopg's other
warnings, this one about any other error included, still log.
"""

from __future__ import annotations

import logging

IGNORED_ON_EXIT = "error ignored terminating %r: %s"


def is_news(record: logging.LogRecord) -> bool:
    """False for the warning that a pipeline which an error aborted skipped its remaining statements."""
    if record.msg != IGNORED_ON_EXIT or not isinstance(record.args, tuple) or len(record.args) != 2:
        return True
    return type(record.args[1]).__name__ != "PipelineAborted"


logging.getLogger("psycopg").addFilter(is_news)
