"""StoreOutage: how a reader of a run waits out a database it cannot reach, and the
StoreUnavailableError a store call raises when its own retries are spent.

tests/chaos/test_postgres_crash.py covers the same with a PostgreSQL server
crashed under readers that follow and wait for runs.
"""

from __future__ import annotations

import asyncio
import time

import pytest
from sqlalchemy.exc import OperationalError

import lg_core
from lg_core.cancellation import CancellationToken
from lg_core.errors import CancelledError, DeadlineExceededError, StoreUnavailableError
from lg_core.interjections import ReplyWait
from lg_core.store.outage_waits import (
    FIRST_PAUSE_SECONDS,
    MAX_PAUSE_SECONDS,
    StoreOutage,
    aread_through_outage,
    call_through_outage,
    read_through_outage,
)
from lg_core.store.transient_errors import RETRIES, is_transient, retry_transient


def _refused() -> OperationalError:
    return OperationalError("SELECT 1", {}, Exception('connection to server at "127.0.0.1" failed: Connection refused'))


@pytest.mark.parametrize(
    "message",
    [
        "FATAL:  the database system is starting up",
        "FATAL:  the database system is in recovery mode",
        "FATAL:  the database system is shutting down",
        "FATAL:  the database system is not yet accepting connections",
        # what psycopg reported while a test crashed the server (tests/chaos/test_postgres_crash.py)
        'connection failed: connection to server at "127.0.0.1", port 33721 failed: '
        "server sent an error response during SSL exchange",
        "terminating connection due to unexpected postmaster exit",
        "consuming input failed: server closed the connection unexpectedly",
        'connection failed: connection to server at "127.0.0.1", port 5432 failed: Connection refused',
    ],
)
def test_a_postgresql_that_is_starting_crashing_or_stopping_is_transient(message):
    assert is_transient(Exception(message))


def test_the_pauses_double_up_to_a_cap():
    outage = StoreOutage("run run-1", limit=None)
    pauses = [outage.pause_after(_refused()) for _ in range(8)]
    assert pauses[0] == FIRST_PAUSE_SECONDS
    assert pauses == sorted(pauses) and pauses[-1] == MAX_PAUSE_SECONDS
    assert all(later <= 2 * earlier for earlier, later in zip(pauses, pauses[1:], strict=False))


def test_an_error_that_is_not_transient_is_raised_at_once():
    wrong = OperationalError("SELECT 1", {}, Exception('password authentication failed for user "lg"'))
    with pytest.raises(OperationalError, match="password authentication failed"):
        StoreOutage("run run-1", limit=None).pause_after(wrong)


def test_a_pause_past_the_readers_deadline_raises_the_deadline_error_with_the_cause():
    outage = StoreOutage("run run-7", limit=time.monotonic() + FIRST_PAUSE_SECONDS / 2)
    with pytest.raises(DeadlineExceededError, match="run run-7: the run store could not be reached") as raised:
        outage.pause_after(_refused())
    assert isinstance(raised.value.__cause__, OperationalError)


def test_a_reader_with_time_left_keeps_trying(caplog):
    outage = StoreOutage("run run-1", limit=time.monotonic() + 60)
    with caplog.at_level("INFO", logger="lg_core.store.outage_waits"):
        assert outage.pause_after(_refused()) == FIRST_PAUSE_SECONDS
        outage.pause_after(_refused())
        outage.ended()
    messages = [record.getMessage() for record in caplog.records]
    assert len([m for m in messages if "cannot be reached" in m]) == 1  # one warning per outage, not per try
    assert any("answers again" in m for m in messages)


class FlakyRead:
    """A store read that fails transiently ``failures`` times, then answers."""

    def __init__(self, failures: int, error=_refused) -> None:
        self.failures, self.error, self.calls = failures, error, 0

    def __call__(self) -> str:
        self.calls += 1
        if self.calls <= self.failures:
            raise self.error()
        return "answer"


def test_a_read_is_tried_again_until_the_store_answers():
    read, pauses = FlakyRead(3), []
    assert read_through_outage(read, "run-1", limit=None, sleep=pauses.append) == "answer"
    assert read.calls == 4 and pauses == [FIRST_PAUSE_SECONDS, 2 * FIRST_PAUSE_SECONDS, 4 * FIRST_PAUSE_SECONDS]


def test_an_async_read_is_tried_again_until_the_store_answers(monkeypatch):
    pauses = []

    async def no_pause(seconds):
        pauses.append(seconds)

    monkeypatch.setattr("lg_core.store.outage_waits.asyncio.sleep", no_pause)
    read = FlakyRead(2)
    assert asyncio.run(aread_through_outage(read, "run-1", limit=None)) == "answer"
    assert read.calls == 3 and len(pauses) == 2


def test_a_read_that_fails_for_good_is_not_retried():
    read = FlakyRead(5, error=lambda: ValueError("no such table: lg_runs"))
    with pytest.raises(ValueError, match="no such table"):
        read_through_outage(read, "run-1", limit=None, sleep=lambda _s: None)
    assert read.calls == 1


def test_a_reply_wait_cancelled_during_an_outage_stops_with_cancelled_error():
    class DownStore:
        def interjection_answer(self, run_id, number):
            raise _refused()

    token = CancellationToken()
    token.cancel("the user left")
    wait = ReplyWait(DownStore(), "run-1", 1, timeout=30, cancellation_token=token)
    with pytest.raises(CancelledError, match="the user left"):
        wait.block()


# -- StoreUnavailableError: what a store call raises once its retries are spent ----------------


def _always(error: Exception):
    tries = []

    @retry_transient
    def call():
        tries.append(1)
        raise error

    return call, tries


def test_a_database_out_of_reach_after_every_retry_raises_store_unavailable(monkeypatch):
    monkeypatch.setattr("lg_core.store.transient_errors.time.sleep", lambda _seconds: None)
    call, tries = _always(_refused())
    with pytest.raises(
        StoreUnavailableError,
        match=r"could not be reached for .* s \(12 tries\);.*The driver said: .*Connection refused",
    ) as raised:
        call()
    assert len(tries) == RETRIES
    assert isinstance(raised.value.__cause__, OperationalError)  # the driver's error is kept
    assert isinstance(raised.value, lg_core.Error) and "works again once the database is back" in str(raised.value)


def test_libpqs_message_on_several_lines_becomes_one():
    call, _ = _always(
        OperationalError("SELECT 1", {}, Exception("server closed the connection unexpectedly\n\tThis probably means"))
    )
    with pytest.raises(StoreUnavailableError) as raised:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr("lg_core.store.transient_errors.time.sleep", lambda _seconds: None)
            call()
    assert "\n" not in str(raised.value) and "unexpectedly This probably means" in str(raised.value)


def test_contention_that_outlasts_the_retries_keeps_the_drivers_error(monkeypatch):
    """A lock held too long is no outage: the caller sees the driver's own error."""
    monkeypatch.setattr("lg_core.store.transient_errors.time.sleep", lambda _seconds: None)
    call, tries = _always(OperationalError("BEGIN IMMEDIATE", {}, Exception("database is locked")))
    with pytest.raises(OperationalError, match="database is locked"):
        call()
    assert len(tries) == RETRIES


def test_an_inner_calls_store_unavailable_is_not_retried_again(monkeypatch):
    """Its retries are spent: the outer call passes it on instead of trying 12 x 12 times."""
    monkeypatch.setattr("lg_core.store.transient_errors.time.sleep", lambda _seconds: None)
    inner, inner_tries = _always(_refused())

    @retry_transient
    def outer():
        inner()

    with pytest.raises(StoreUnavailableError):
        outer()
    assert len(inner_tries) == RETRIES


def test_readers_wait_out_a_store_unavailable_error_like_the_drivers():
    assert is_transient(StoreUnavailableError("the store's database could not be reached"))
    answers = iter([StoreUnavailableError("down"), "the run"])

    def read():
        answer = next(answers)
        if isinstance(answer, Exception):
            raise answer
        return answer

    assert read_through_outage(read, "run-1", limit=None, sleep=lambda _seconds: None) == "the run"


def _unavailable() -> StoreUnavailableError:
    return StoreUnavailableError("the store's database could not be reached for 6.2 s (12 tries)")


def test_a_write_is_sent_again_while_the_store_is_out_of_reach(caplog):
    write, pauses = FlakyRead(3, error=_unavailable), []
    with caplog.at_level("INFO", logger="lg_core.store.outage_waits"):
        assert call_through_outage(write, "the commit of step s", patience=60, sleep=pauses.append) == "answer"
    assert write.calls == 4 and pauses == [FIRST_PAUSE_SECONDS, 2 * FIRST_PAUSE_SECONDS, 4 * FIRST_PAUSE_SECONDS]
    messages = [record.getMessage() for record in caplog.records]
    assert [m for m in messages if "cannot be reached" in m] == [
        f"the commit of step s: the run store cannot be reached ({_unavailable()}); trying again until it answers"
    ]
    assert any(m.startswith("the commit of step s: the run store answers again after") for m in messages)


def test_a_write_without_patience_raises_the_first_store_unavailable_error():
    write = FlakyRead(1, error=_unavailable)
    with pytest.raises(StoreUnavailableError, match="could not be reached"):
        call_through_outage(write, "the commit of step s", patience=0, sleep=lambda _s: None)
    assert write.calls == 1


def test_a_write_whose_patience_runs_out_raises_the_last_store_unavailable_error():
    write = FlakyRead(1000, error=_unavailable)
    started = time.monotonic()
    with pytest.raises(StoreUnavailableError):
        call_through_outage(write, "the commit of step s", patience=0.3)
    assert 0.3 <= time.monotonic() - started < 5  # the last pause is cut to the patience left
    assert 2 <= write.calls <= 4


@pytest.mark.parametrize("error", [_refused, lambda: ValueError("no such table: lg_runs")])
def test_a_write_is_not_sent_again_after_any_other_error(error):
    """A driver error reaching here outlasted the write's own retries (contention), or is the write's answer."""
    write = FlakyRead(1, error=error)
    with pytest.raises(type(error())):
        call_through_outage(write, "the commit of step s", patience=60, sleep=lambda _s: None)
    assert write.calls == 1
