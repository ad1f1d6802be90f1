"""Which runs the current thread is executing a step of.

A tool may ask another agent (``Inner.ask(...)`` inside ``call``): the inner
run then executes on the tool's thread, inside the outer run's step. If the
inner run uses the outer run's session it waits for the outer run to end, which
waits for the tool, which waits for the inner run: neither ever ends. The
opening of a run looks here to refuse that wait (lg_core.engine._opening).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

_executing: ContextVar[frozenset[str]] = ContextVar("lg_executing_runs", default=frozenset())


@contextmanager
def executing(run_id: str) -> Iterator[None]:
    """Mark ``run_id`` as executing a step in this context (and in runs started from it)."""
    token = _executing.set(_executing.get() | {run_id})
    try:
        yield
    finally:
        _executing.reset(token)


def executing_runs() -> frozenset[str]:
    """The runs with a step executing in this context: the step's own run and, for a run
    a tool started, the runs whose tools started it."""
    return _executing.get()


__all__ = ["executing", "executing_runs"]
