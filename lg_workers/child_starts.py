"""A child run that a step starts on this worker continues on the step's thread.

A Graph node, a Workflow call, a subagent's turn or an agent tool starts its child run
from inside its step, then parks that step (it commits as waiting, holding no thread).
Publishing the child's first step sends it through the broker to whichever worker takes
it, a hop of several milliseconds on the child's path, while the thread that started it
is about to be free. So while a chain (lg_workers.continuation) runs a step, a child
start keeps the child's first steps of the queues this worker consumes for the chain,
which runs the first of them next, right after the parking commit, exactly as it runs a
successor of its own run; the rest are published as usual.

Nothing is lost with the hop: the first step is in the run store's outbox from the
child's own start, so if this process dies before running it the scheduler's relay sends
it again, as for any step whose publish never happened; and whatever the chain does not
run (a step that raised, a chain at its bounds) is published by ``kept``'s exit.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from lg_core.engine.dispatcher import StepRef
from lg_workers.queues import queue_for


class _Kept(threading.local):
    queues: frozenset[str] | None = None  # the chain's queues while a chain runs on this thread
    refs: list[StepRef]

    def __init__(self) -> None:
        self.refs = []


_KEPT = _Kept()


def keep_for_chain(refs: list[StepRef]) -> list[StepRef]:
    """Keep for this thread's chain the refs of the queues it consumes; returns the ones to publish."""
    queues = _KEPT.queues
    if queues is None:
        return refs
    ours = [ref for ref in refs if (ref.queue or queue_for(ref.task_name)) in queues]
    if not ours:
        return refs
    _KEPT.refs.extend(ours)
    return [ref for ref in refs if ref not in ours]


def take_kept() -> list[StepRef]:
    """The child steps kept since the last call, for the chain to run or publish."""
    refs, _KEPT.refs = _KEPT.refs, []
    return refs


@contextmanager
def kept(queues: frozenset[str], publish: Callable[[list[StepRef]], None]) -> Iterator[None]:
    """Keep child starts for the chain running on this thread; on the way out, publish what is left."""
    _KEPT.queues, _KEPT.refs = queues, []
    try:
        yield
    finally:
        left = take_kept()
        _KEPT.queues = None
        if left:
            publish(left)


__all__ = ["keep_for_chain", "kept", "take_kept"]
