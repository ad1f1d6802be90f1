"""CancellationToken.on_cancel: how blocked work (a socket read) learns of a cancel it cannot poll for."""

from __future__ import annotations

from lg_core import CancellationToken


def test_a_callback_runs_once_on_cancel_and_not_after_it_is_removed():
    token = CancellationToken()
    calls = []
    token.on_cancel(lambda: calls.append("kept"))
    forget = token.on_cancel(lambda: calls.append("removed"))
    forget()

    token.cancel("stop")
    token.cancel("again")

    assert calls == ["kept"]


def test_a_callback_on_a_cancelled_token_runs_at_once():
    token = CancellationToken()
    token.cancel()
    calls = []

    token.on_cancel(lambda: calls.append(True))()  # the remover is harmless too

    assert calls == [True]


def test_a_failing_callback_does_not_stop_cancellation_reaching_children():
    parent = CancellationToken()
    child = parent.child()

    def fail():
        raise RuntimeError("socket already gone")

    parent.on_cancel(fail)
    parent.cancel("stop")

    assert child.cancelled and child.reason == "stop"
