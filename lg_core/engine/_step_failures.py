"""Steps that keep failing on workers: retried with backoff, then their run fails.

A distributed step is retried whenever an attempt ends without its commit:
the worker process died (SIGKILL, the OOM killer, a crash in a C extension)
or the attempt raised an error that is not the run's own outcome (a worker
that cannot import the run's agent, a store briefly unreachable). Without a
bound, a step that always fails that way is retried forever and its run stays
``running`` with nothing to show for it, which is what users of job systems
call a poison message.

So, as Celery's ``max_retries`` and DBOS's ``max_recovery_attempts`` do:

* an attempt that raised gives its step back at once, due after a delay that
  doubles with each attempt (1 s, 2 s, 4 s ... at most a minute; the outbox
  relay sends it when due), and its error is kept on the step row, where
  ``lg runs show`` prints it;
* the claim that would start attempt ``max_step_attempts + 1`` (setting
  ``max_step_attempts``, default 10) ends the run ``failed`` instead, with a
  RunStateError naming the step, the attempts and the last error. ``lg runs
  retry`` gives the step as many attempts again once the cause is fixed.

A died worker leaves no error behind (nothing ran to record it); its step is
taken over when its holder is seen dead or its lease expires, as before.
"""

from __future__ import annotations

import time
from typing import Any

from lg_core.errors import RunStateError

FIRST_RETRY_DELAY_SECONDS = 1.0
MAX_RETRY_DELAY_SECONDS = 60.0
MAX_ERROR_MESSAGE_CHARS = 2000


def retry_delay(attempt: int) -> float:
    """Seconds before attempt ``attempt + 1`` of a step whose attempt ``attempt`` raised."""
    exponent = min(max(attempt, 1) - 1, 16)  # 2**16 s is far past the cap
    return min(MAX_RETRY_DELAY_SECONDS, FIRST_RETRY_DELAY_SECONDS * 2.0**exponent)


def failure_record(error: BaseException, attempt: int) -> dict[str, Any]:
    """What the step row keeps about a failed attempt (bounded: an error message can be huge)."""
    message = str(error)
    if len(message) > MAX_ERROR_MESSAGE_CHARS:
        message = message[: MAX_ERROR_MESSAGE_CHARS - 3] + "..."
    return {"name": type(error).__name__, "message": message, "attempt": attempt, "at": time.time()}


def attempts_exhausted(run_id: str, key: str, attempts: int, last_error: dict[str, Any] | None) -> RunStateError:
    """The error a run fails with when its step ran out of attempts."""
    if last_error and last_error.get("name"):
        cause = f"the last attempt raised {last_error['name']}: {last_error.get('message', '')}"
    else:
        cause = "no attempt recorded an error, so their worker processes died (killed, out of memory or crashed)"
    return RunStateError(
        f"step {key!r} of run {run_id} did not complete in {attempts} attempts ({cause}); the run failed "
        f"instead of retrying forever (max_step_attempts). Fix the cause, then `lg runs retry {run_id}`"
    )


__all__ = [
    "FIRST_RETRY_DELAY_SECONDS",
    "MAX_RETRY_DELAY_SECONDS",
    "attempts_exhausted",
    "failure_record",
    "retry_delay",
]
