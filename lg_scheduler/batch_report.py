"""What a batch submit did: its counts, outcomes and (when kept) its result lines."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class BatchReport:
    """What a submit did.

    ``results`` are the result lines, in the order items finished, when the submit
    kept them (``keep_results``; by default only without an ``out`` file). A batch
    writing to ``out`` leaves it empty, so that its memory does not grow with the
    number of items: read the file instead.
    """

    batch_id: str
    agent: str
    total: int
    completed: int = 0
    failed: int = 0
    invalid: int = 0
    already_finished: int = 0  # items whose run had finished before this submit (results from the store)
    waited: int = 0  # runs already in flight when this submit began (waited for or resumed)
    resumed: int = 0  # of those, runs of a dead submitter resumed here
    started: int = 0  # runs this submit started
    outcomes: dict[str, int] = field(default_factory=dict)
    out: Path | None = None
    results: list[dict[str, Any]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Every item's run completed."""
        return self.completed == self.total


__all__ = ["BatchReport"]
