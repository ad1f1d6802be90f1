"""One model call of a turn, streamed: with the spec's recovery, retry back-off and rate-limit pacing.

A model turn (``_model_turn.py``) builds the request and decides what the
answer means; between the two, this sends the request and streams the
provider's events to the run. A provider error is offered to the agent's
``after_model_error`` callbacks (a replacement request is sent at once) and a
retryable one is retried with back-off, each retry announced by a
``model_retry`` event; a call under a rate limit first waits for its slot.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from lg_core.callbacks import run_chain
from lg_core.engine._checkpoint import AgentCheckpoint
from lg_core.engine._step_scope import StepScope, run_error_to_dict
from lg_core.errors import CancelledError, DeadlineExceededError, ProtocolError, ProviderError
from lg_core.models.request import ModelRequest, ModelResponse
from lg_core.usage import Usage

log = logging.getLogger("lg_core.engine")
RECOVERY_LIMIT = 2
# The longest Retry-After a model turn waits for in its step (holding its claim); a provider
# asking for more fails the turn, and the run can be retried once the limit has reset.
MAX_RETRY_AFTER = 60.0
PACE_CHECK_SECONDS = 0.5  # a rate-limited call waiting for its slot checks cancellation this often


class ModelCall:
    def __init__(self, scope: StepScope) -> None:
        self.scope = scope
        # The text streamed so far by the current model call, in pieces: joined once, when
        # read, since appending to one string copies it and costs quadratic time.
        self._partial_pieces: list[str] = []
        self.calls_made = 0

    @property
    def partial_text(self) -> str:
        """The text the current model call has streamed so far (a partial run's response)."""
        return "".join(self._partial_pieces)

    def stream(self, agent: Any, model: Any, request: ModelRequest, checkpoint: AgentCheckpoint) -> ModelResponse:
        # Hand-written, not tenacity: each retry sends what the after_model_error callbacks return
        # (maybe another request).
        while True:
            sequence = checkpoint.model_calls + self.calls_made
            attempt = _with_sequence(request, sequence)
            self.calls_made += 1
            self._pace(model)
            try:
                return self._stream_once(model, attempt)
            except ProviderError as error:
                request = self._recover(agent, attempt, error, checkpoint)

    def _recover(
        self, agent: Any, request: ModelRequest, error: ProviderError, checkpoint: AgentCheckpoint
    ) -> ModelRequest:
        scope = self.scope
        payload = {"request": request, "error": error, "turn": checkpoint.turn, "parent_operation_id": None}
        decision = run_chain(agent, "after_model_error", payload, context=scope.context)
        if decision.cancelled:
            raise CancelledError(decision.reason or "an after_model_error callback cancelled the invocation")
        retries = self.calls_made
        replacement: ModelRequest  # a callback's replacement is a ModelRequest too (run_chain checks it)
        if decision.replaced and retries <= RECOVERY_LIMIT:
            replacement, delay = decision.value["request"], 0.0  # a replacement is sent at once
        elif getattr(error, "retryable", False) and retries <= RECOVERY_LIMIT and not _asks_too_long(error):
            replacement, delay = request, _retry_delay(retries, getattr(error, "retry_after", None))
        else:
            raise error
        self._note_retry(error, retries + 1, delay)
        # Announced before the wait, with its length: a consumer learns at once that the call
        # failed and when it is tried again, even if the deadline or a cancel ends the wait.
        message = scope.engine.safe_error_message(error, scope.run)  # the error's own text is the operator's
        scope.emit(
            "model_retry",
            attempt=retries + 1,
            partial_text=bool(self._partial_pieces),
            error_class=type(error).__name__,
            message=message,
            delay=delay,
        )
        self._partial_pieces.clear()
        if delay:
            self._backoff(delay, error)
        return replacement

    def _note_retry(self, error: ProviderError, attempt: int, delay: float) -> None:
        """Why the model call is retried, for operators: the log and the run's diagnostics (a caller's
        ``model_retry`` event carries the caller-safe message only)."""
        scope = self.scope
        scope.run.record_diagnostic(
            {
                "kind": "model_retry",
                "step": scope.key,
                "attempt": attempt,
                **run_error_to_dict(error, scope.agent_class),
            }
        )
        log.info(
            "the model call of step %s of run %s is retried (attempt %d, in %.2f s) after %s: %s",
            scope.key,
            scope.run.id,
            attempt,
            delay,
            type(error).__name__,
            error,
        )

    def _backoff(self, delay: float, error: ProviderError) -> None:
        """Wait ``delay`` seconds before retrying after ``error``; never past the deadline,
        and a cancel ends it. A deadline reached meanwhile names the retry it cut short."""
        remaining = self.scope.context.remaining_time(delay) if self.scope.context else delay
        self.scope.run.cancellation_token.wait(remaining or 0)
        try:
            self.scope.check_interrupt()
        except DeadlineExceededError as exc:
            raise DeadlineExceededError(
                f"The run reached its deadline while waiting {delay:g} s to retry the model call "
                f"after {type(error).__name__}: {error}"
            ) from exc

    def _pace(self, model: Any) -> None:
        """Wait for this call's slot when the run, or the configuration for its connection,
        has a rate limit (lg_core.rate_limit).

        The step holds its claim meanwhile (the heartbeat renews the lease, as for
        a slow model), and the wait ends early on cancellation or the deadline.
        """
        connection = model.connection
        runtime = self.scope.engine.runtime
        limit = self.scope.run.invocation.rate_limit or runtime.rate_limits.get(connection)
        if limit is None:
            return
        # The wait runs from when the reservation's answer is here, not from before it was
        # asked: the slot's "seconds from now" were counted on Redis, and starting the clock
        # before the round trip let a call go up to one round trip before its slot.
        wait = runtime.rate_limiter.reserve(connection, limit)
        until = time.monotonic() + wait
        while (left := until - time.monotonic()) > 0:
            context = self.scope.context
            pause = context.remaining_time(min(left, PACE_CHECK_SECONDS)) if context else min(left, PACE_CHECK_SECONDS)
            self.scope.run.cancellation_token.wait(pause or 0)
            self.scope.check_interrupt()

    def _stream_once(self, model: Any, request: ModelRequest) -> ModelResponse:
        scope = self.scope
        response: ModelResponse | None = None
        # A provider reports usage before it checks the answer it assembled (a tool call cut
        # off by the output limit, malformed arguments): those tokens were spent, and are
        # counted when that check fails the call, as they are when message_stop arrives.
        reported: Any = None
        try:
            for event in model.stream(request):
                scope.check_interrupt()
                if event.type == "text_delta":
                    if text := event.data.get("text"):
                        self._partial_pieces.append(text)
                if event.type == "usage":
                    reported = event.data.get("usage")
                if event.type == "message_stop":
                    response = event.data.get("response")
                    if response is not None:  # counted even if the turn then fails the run
                        reported = None
                        scope.built_context.record_usage(response.usage)
                scope.emit_event(event)
        except BaseException:
            if isinstance(reported, Usage):
                scope.built_context.record_usage(reported)
            raise
        if response is None:
            # A protocol violation, not a malformed tool call: the stream may hold no tool call at all.
            raise ProtocolError(
                f"the provider stream for {model.target} ended without a message_stop event carrying its "
                "ModelResponse; a provider must finish every stream with one"
            )
        return response


def _with_sequence(request: ModelRequest, sequence: int) -> ModelRequest:
    """``request`` with ``metadata["sequence"] = sequence``: itself when it already says so
    (a first call, unless a callback changed it), so the common case copies nothing."""
    current = request.metadata.get("sequence")
    if type(current) is int and current == sequence:
        return request
    return request.replace(metadata={**request.metadata, "sequence": sequence})


def _asks_too_long(error: ProviderError) -> bool:
    """Does ``error`` ask for a wait longer than MAX_RETRY_AFTER? The turn then fails with it:
    a retry sooner than asked would meet the same refusal."""
    asked = getattr(error, "retry_after", None)
    return isinstance(asked, int | float) and asked > MAX_RETRY_AFTER


def _retry_delay(retries: int, asked: float | None = None) -> float:
    """Seconds to wait before retry ``retries``: limited exponential backoff, or the longer wait
    the provider asked for (``HTTPError.retry_after``, from ``Retry-After``; one over
    MAX_RETRY_AFTER fails the turn first, ``_asks_too_long``), so a rate limit that resets
    in seconds is not retried into the same refusal."""
    delay = min(0.25 * 2.0 ** (retries - 1), 2.0)
    if isinstance(asked, int | float) and asked > delay:
        delay = float(asked)
    return delay


__all__ = ["MAX_RETRY_AFTER", "ModelCall"]
