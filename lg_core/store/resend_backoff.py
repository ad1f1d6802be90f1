"""How long the outbox relay, and the lease sweeper, wait before they send a step again.

The relay (lg_scheduler.recovery.relay_outbox) sends a scheduled step whose
``dispatch_after`` passed. Sent every ``relay_grace`` regardless, a step whose
queue has no consumer (nobody runs ``lg worker --queues lg.tools``, or its
workers are down for an hour) gained one duplicate message per grace, and the
worker that finally came up chewed through hundreds of them, each a store
lookup. So each step backs off on its own, as a retried task does:

* A step's ``relays`` column counts the relay's sends since the step last
  entered the outbox (scheduled, released for a retry, rescheduled) or was
  claimed; a claim resets it, so a step that is consumed starts afresh.
* A **miss** is a send of a step whose previous message was not consumed in
  time. Every send is one, except the first send of a step released for a
  retry: its attempt raised and it waited out its retry delay with no message
  out, so that send is its delivery, as ``publish`` is a fresh step's.
* After its ``n``-th miss a step is due again ``grace * 2**(n - 1)`` seconds
  later (grace, 2x, 4x ...), at most ``cap`` (``relay_backoff_max``) and never
  less than the grace. A delivery send is due again one grace later.

The lease sweeper (lg_scheduler.recovery.sweep_leases) re-sends a running step
whose holder is gone, and the same flood awaited it: a step whose tools fleet is
down was re-sent every hold-off (the lease) for as long as nobody came. So it
backs off by the same rule, with its hold-off as the grace, and counts in the
same ``relays`` column: a running step's count is the sweeper's re-sends since
its last claim. One column serves both because the relay only sends scheduled
steps and the sweeper only running ones, and every move between those statuses
(a claim; a release for a retry) resets it. The sweeper's first re-send after a
holder dies is a delivery, like a retry's: the dead holder had consumed the
step's message and none is out for it, so it goes at once (a SIGKILLed worker's
step is re-dispatched as soon as it is seen dead) and only the re-sends after it
back off.

Each sweep reports, per level, how long a step has waited for a consumer; a
step's level is all the sweep knows of its history, so that wait is the sum
of the delays up to its level: a lower bound (the scheduler may have been
down meanwhile), exact when every pass ran on time.
"""

from __future__ import annotations

from lg_core.store.records import StepRecord

MAX_DOUBLINGS = 30  # 2**30 grace-periods is past any cap


def misses(sends: int, step: StepRecord) -> int:
    """How many of a step's ``sends`` (its ``relays`` after this send) found no consumer.

    The first send delivers, and is no miss, when no message was out for the step:
    a retry's (its attempt raised and waited out its delay) and a running step's
    (the lease sweeper re-sends it because the holder that consumed its message died).
    """
    delivered_first = step.awaits_retry or step.status == "running"
    return max(sends - (1 if delivered_first else 0), 0)


def delay(missed: int, grace: float, cap: float) -> float:
    """Seconds until the relay sends a step again after its ``missed``-th miss (0: a delivery)."""
    level = min(max(missed, 1) - 1, MAX_DOUBLINGS)
    return max(grace, min(grace * 2.0**level, cap))


def waited(missed: int, grace: float, cap: float) -> float:
    """At least how long a step with ``missed`` misses has waited for a consumer (seconds).

    Its first unconsumed message had one grace before the first miss, then each
    miss's delay before the next: grace + delay(1) + ... + delay(missed - 1).
    """
    total, level = (grace, 1) if missed >= 1 else (0.0, missed)
    while level < missed:
        step = delay(level, grace, cap)
        if step >= max(cap, grace):  # at the cap: every later delay is the same
            return total + step * (missed - level)
        total, level = total + step, level + 1
    return total


def new_level(missed: int, grace: float, cap: float) -> bool:
    """Whether this miss moved the step's back-off to a longer delay (reported once per level)."""
    return missed >= 1 and (missed == 1 or delay(missed, grace, cap) > delay(missed - 1, grace, cap))


__all__ = ["delay", "misses", "new_level", "waited"]
