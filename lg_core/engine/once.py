"""``Run.once``: perform a block at most once successfully per key in a run, in any process.

The spec: "Concurrent callers are serialized. The caller that performs the
block receives its value; later callers receive nil. If the block raises, the
key is not recorded and a later call may retry it." A run's tool calls execute
on several threads and workers, so callers are serialized through a claim in
the store (lg_core.store.once), and a caller that finds the key claimed waits
until the claim settles: performed (it gets None), or given up because the
block raised (it claims the key and tries itself).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from lg_core.identity import current_holder, holder_is_dead

if TYPE_CHECKING:
    from lg_core.run import Run

POLL_SECONDS = 0.05  # how often a waiting caller looks at the claim (a short block is the usual case)


def perform_once(run: Run, key: str, block: Callable[[], Any]) -> Any:
    """``block()`` if nobody performed ``key`` in ``run`` yet, else None (waiting for a holder first)."""
    engine = run.runtime.engine
    store, step_key, me = run.runtime.store, f"once/{key}", current_holder()
    while True:
        claim = store.claim_once(run.id, step_key, me, engine.lease_seconds)
        if claim.state == "done":
            return None
        if claim.state == "claimed":
            return _perform(run, step_key, me, block)
        if _settled_elsewhere(run, step_key):
            return None


def _settled_elsewhere(run: Run, step_key: str) -> bool:
    """Wait, reading the claim (a read, not a write transaction per look), until another caller
    performed the block (True) or the key is free again: released, or taken from a holder that
    is gone (False: claim it)."""
    store = run.runtime.store
    while True:
        step = store.load_step(run.id, step_key)
        if step is None:
            return False
        if step.status == "succeeded":
            return True
        if _gone(step.holder, step.lease_until):
            store.drop_once(run.id, step_key, step.holder)  # conditional: only that holder's claim
            return False
        run.cancellation_token.raise_if_cancelled()
        run.cancellation_token.wait(POLL_SECONDS)


def _perform(run: Run, step_key: str, me: str, block: Callable[[], Any]) -> Any:
    """Run the block under the claim: its lease is renewed while it runs, and released if it raises."""
    store = run.runtime.store
    with run.runtime.engine.heartbeat.holding(run.id, step_key):
        try:
            value = block()
        except BaseException:
            store.drop_once(run.id, step_key, me)  # "the key is not recorded and a later call may retry it"
            raise
    store.finish_once(run.id, step_key, me)
    return value


def _gone(holder: str | None, lease_until: float | None) -> bool:
    """A claim nobody will settle: its process died on this host, or its lease ran out."""
    return holder_is_dead(holder) or lease_until is None or lease_until < time.time()


__all__ = ["perform_once"]
