"""``Run.once``: perform a block at most once successfully per key in a run, in any process.

The spec: "Concurrent callers are serialized. The caller that performs the
block receives its value; later callers receive nil. If the block raises, the
key is not recorded and a later call may retry it." A run's tool calls execute
on several threads and workers, so callers are serialized through a claim in
the store (lg_core.store._once_claims), and a caller that finds the key claimed waits
until the claim settles: performed (it gets None), or given up because the
block raised (it claims the key and tries itself).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from lg_core.errors import InvocationError
from lg_core.lease_holders import current_holder, holder_is_dead

if TYPE_CHECKING:
    from lg_core.engine._run_protocol import EngineRun

POLL_SECONDS = 0.05  # how often a waiting caller looks at the claim (a short block is the usual case)


MAX_KEY_LENGTH = 200  # "once/" + key is a step key (at most 300 characters)


def perform_once(run: EngineRun, key: str, block: Callable[[], Any]) -> Any:
    """``block()`` if nobody performed ``key`` in ``run`` yet, else None (waiting for a holder first)."""
    _check(key, block)
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


def _check(key: Any, block: Any) -> None:
    """A key is a non-empty string: ``None`` and ``5`` were taken as "None" and "5", so two
    different keys could share one record."""
    if not isinstance(key, str) or not key:
        raise InvocationError(f"Run.once needs a non-empty string key, got {key!r}"[:200])
    if len(key) > MAX_KEY_LENGTH:
        raise InvocationError(f"Run.once keys are at most {MAX_KEY_LENGTH} characters, got {len(key)}")
    if not callable(block):
        raise InvocationError(f"Run.once needs a block to call, got {type(block).__name__}")


def _settled_elsewhere(run: EngineRun, step_key: str) -> bool:
    """Wait, reading the claim (a read, not a write transaction per look), until another caller
    performed the block (True) or the key is free again: released, or taken from a holder that
    is gone (False: claim it).

    A holder is gone when its process died on this host, or when its lease ran out by the
    store's clock (the read says so): never by this host's clock, which may run ahead.
    """
    store = run.runtime.store
    while True:
        claim = store.look_once(run.id, step_key)
        if claim is None:
            return False
        if claim.state == "done":
            return True
        if holder_is_dead(claim.holder):
            store.drop_once(run.id, step_key, claim.holder)  # conditional: only that holder's claim
            return False
        if claim.expired:
            # Conditional on the lease still being expired: a renewal since the read keeps the claim.
            store.drop_once(run.id, step_key, claim.holder, expired_only=True)
            return False
        run.cancellation_token.raise_if_cancelled()
        run.cancellation_token.wait(POLL_SECONDS)


def _perform(run: EngineRun, step_key: str, me: str, block: Callable[[], Any]) -> Any:
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


__all__ = ["perform_once"]
