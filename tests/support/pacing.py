"""Checking a rate limit's pace from when calls reached the model, whatever the machine's load.

The limiter (lg_core.rate_limit) reserves slots ``interval`` apart and a call
waits for its slot, so a call never reaches the model before its slot; it may
reach it later, when its thread wakes behind other work. Counting calls in a
sliding window mistakes that lateness for a burst: slots 0.1 s apart whose
first calls woke 0.3 s late can put 13 calls in one second. A lower bound
cannot be fooled that way: the first slot is no earlier than the moment
the calls could start, and the ``k``-th call (in time order) is no earlier
than the ``k``-th slot, so it comes at least ``k`` intervals after that
moment. Lateness only makes calls later. A limiter that let calls through
faster (none at all, one budget per process, a burst at the start) makes some
``k``-th call come early, and the check names it. It named one: the wait for a
slot was counted from before the reservation's round trip to Redis, so calls
came up to a round trip early (the "13 calls in one second" CI once saw, first
put down to lateness).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

# Float sums of intervals, a slot written with six decimals (Redis), a sleep's rounding.
TOLERANCE = 0.01


def early_calls(times: list[float], start: float, interval: float) -> list[str]:
    """The calls among ``times`` that came before their earliest possible slot; [] when paced.

    ``start``: a moment on the same clock, no later than the first slot could be
    reserved, and the closer to it the more the check can tell (read before the
    first run was begun, or ``first_model_claim``).
    """
    return [
        f"call {k} at +{at - start:.3f} s, before its slot at +{k * interval:.3f} s"
        for k, at in enumerate(sorted(times))
        if at < start + k * interval - TOLERANCE
    ]


def first_model_claim(store: Any, run_ids: Iterable[str]) -> float:
    """When the first model step of these runs was claimed by a worker, or (a run executed
    where it was begun, whose steps are not claimed) scheduled: ``time.time`` of that host.

    Either comes before the step's call reserves a slot, so no slot is earlier; and
    unlike the runs' creation it comes just before the first call, however long
    the runs waited for a worker.
    """
    return min(
        step.started_at if step.started_at is not None else step.created_at
        for run_id in run_ids
        for step in store.load_steps(run_id)
        if step.kind == "model"
    )
