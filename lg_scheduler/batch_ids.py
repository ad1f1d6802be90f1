"""A batch's id, and the run id of each of its items (derived, so a resubmit finds its runs)."""

from __future__ import annotations

import hashlib
import re

BATCH_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")
_READABLE_ITEM_ID = re.compile(r"^[A-Za-z0-9._@-]{1,63}$")


def default_batch_id(agent_cls: type, digest: str) -> str:
    """``<agent_id>-<12 hex>``: a hash of the agent's import path and the input file's sha256."""
    path = f"{agent_cls.__module__}:{agent_cls.__qualname__}"
    hashed = hashlib.sha256(f"{path}\n{digest}".encode()).hexdigest()[:12]
    prefix = re.sub(r"[^A-Za-z0-9_-]", "-", getattr(agent_cls, "agent_id", "batch"))[:40].strip("-_") or "batch"
    return f"{prefix}-{hashed}"


def run_id_for(batch_id: str, item_id: str) -> str:
    """The run id of an item: ``<batch>.<item>``, or ``<batch>:<hash>`` for ids that are not plain.

    Batch ids contain neither ``.`` nor ``:``, so the two forms never collide with
    each other or with another batch's run ids.
    """
    if _READABLE_ITEM_ID.fullmatch(item_id):
        return f"{batch_id}.{item_id}"
    return f"{batch_id}:{hashlib.sha256(item_id.encode()).hexdigest()[:32]}"


__all__ = ["BATCH_ID", "default_batch_id", "run_id_for"]
