"""Fixtures for the replay tests: a clean call log and a registered outage model."""

from __future__ import annotations

import pytest

from tests.replay import replay_app


@pytest.fixture(autouse=True)
def calls():
    """The tool call log, empty for each test."""
    replay_app.CALLS.clear()
    replay_app.STOP_ONCE.clear()
    replay_app.STOP_BEFORE.clear()
    yield replay_app.CALLS
    replay_app.CALLS.clear()
    replay_app.STOP_ONCE.clear()
    replay_app.STOP_BEFORE.clear()


@pytest.fixture
def outage(script):
    """``(model, target)``: a scripted model whose answer turn fails until ``model.down = False``."""
    model = replay_app.Outage()
    return model, script(model)


def seqs(run) -> list[int]:
    return [event.seq for event in run.events()]


def gapless(run) -> bool:
    numbers = seqs(run)
    return numbers == list(range(1, len(numbers) + 1))
