"""Every public look-up of a run by id refuses an id no run can have, before the store sees it.

Before, each entry point checked ids its own way: ``get_run(5)`` said "not
found" while ``get_execution(5)`` said "not a string", and an id with a NUL
byte reached PostgreSQL, which raised psycopg's ``DataError`` out of
``get_run``, ``resume``, ``cancel_run``, ``retry``, ``fork`` and the CLI.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pytest
from typer.testing import CliRunner

import lg_core
from lg_core import Agent, replay
from lg_core.cli import app, runs_app
from lg_core.config import Configuration, with_configuration
from lg_core.errors import InvocationError, RunNotFoundError
from lg_core.providers import scripted
from lg_core.replay_cli import register

LOOKUPS: dict[str, Callable[[Any], Any]] = {
    "get_run": lg_core.get_run,
    "get_execution": lg_core.get_execution,
    "resume": lg_core.resume,
    "cancel_run": lg_core.cancel_run,
    "interject": lambda run_id: lg_core.current_runtime().interject(run_id, "more"),
    "retry": replay.retry,
    "fork": lambda run_id: replay.fork(run_id, from_step="root/turn-1/model"),
}

IMPOSSIBLE_IDS = ["run\x00one", "caf\u00e9", "a" * 129]


@pytest.fixture
def configured(durable_url):
    configuration = Configuration(run_store=durable_url)
    with with_configuration(configuration):
        yield configuration
    configuration.close()


@pytest.mark.parametrize("lookup", LOOKUPS)
@pytest.mark.parametrize("run_id", IMPOSSIBLE_IDS)
def test_an_id_no_run_can_have_is_not_found_with_the_rule(configured, lookup, run_id):
    with pytest.raises(RunNotFoundError, match=r"no run has the id .*: run ids are 1-128 characters"):
        LOOKUPS[lookup](run_id)


@pytest.mark.parametrize("lookup", LOOKUPS)
@pytest.mark.parametrize("run_id", [5, ""])
def test_a_run_id_that_is_not_a_string_is_an_invocation_error(configured, lookup, run_id):
    with pytest.raises(InvocationError, match="a run id is a non-empty string"):
        LOOKUPS[lookup](run_id)


def test_a_long_impossible_id_is_quoted_cut_short(configured):
    with pytest.raises(RunNotFoundError) as raised:
        lg_core.get_run("x" * 5000)
    assert "(5000 characters)" in str(raised.value)
    assert len(str(raised.value)) < 250


def test_a_well_formed_id_still_finds_its_run(configured):
    model = f"lookup-{uuid.uuid4().hex[:8]}"
    scripted.register(model, [{"text": "found"}])
    try:
        agent = type("LookupAgent", (Agent,), {"model": f"scripted:{model}"})
        run = agent.ask("hello", run_id="order-481.attempt:2@eu")
        assert lg_core.get_run("order-481.attempt:2@eu").response == "found"
        with pytest.raises(RunNotFoundError, match="no run with id 'order-482'"):
            lg_core.get_run("order-482")
        assert run.completed
    finally:
        scripted.unregister(model)


@pytest.fixture
def replay_commands():
    """``lg runs retry`` and ``fork`` on the app (``main()`` adds them from their entry point)."""
    if not any(command.name == "retry" for command in runs_app.registered_commands):
        register(app, runs_app)


@pytest.mark.parametrize(
    "command", [["show"], ["events"], ["resume"], ["retry"], ["cancel"], ["fork", "--from-step", "root/turn-1/model"]]
)
def test_the_cli_says_not_found_for_an_impossible_id(configured, durable_url, replay_commands, command):
    configured.runtime()  # creates the store the commands open
    args = ["runs", command[0], "run\x01one", *command[1:], "--store", durable_url]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    assert "no run has the id 'run\\x01one': run ids are 1-128 characters" in result.output
    assert "Traceback" not in result.output
