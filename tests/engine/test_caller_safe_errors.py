"""What a caller sees of an error is caller-safe; its own text stays with the operator.

The spec's ``Hook#error_message`` maps errors to caller-safe messages ("avoid
exposing secrets or internal exception text"); without a hook that answers, a
terminal or ``model_retry`` event says the error's class and a fixed sentence.
The error's own text (a provider's answer naming internal hosts) stays in the
store's ``error`` of the run and its step (``lg runs show``), in the run's
diagnostics and in the log. These tests read each place as a caller or an
operator would: the stored events (what ``Execution.events`` and the web app's
stream serve), the SQLite rows, ``lg runs show``.
"""

from __future__ import annotations

import json
import logging
import sqlite3

import pytest
from typer.testing import CliRunner

import lg_core
from lg_core import (
    Agent,
    ContextWindowOverflowError,
    DeadlineExceededError,
    Hook,
    HTTPError,
    MalformedToolCallError,
    ProviderError,
    Run,
    StructuredResultError,
    ToolLoopError,
)
from lg_core.cli import app
from lg_core.execution import event_json
from tests.providers import openai_server
from tests.providers.agents import SupportAgent, use_connection

INTERNAL = "db-7.corp.internal:5432"  # what a provider's answer names and no caller may read
SAFE_HTTP_MESSAGE = "HTTPError: the model provider returned an error."


@pytest.fixture
def server():
    yield from openai_server.serve()


@pytest.fixture
def gateway(file_config, server):
    use_connection("gateway:test-model", {"adapter": "openai", "api_key": "sk-test-caller-safe"}, server)
    return server


def refusal(status=400):
    return openai_server.error(status, f"upstream {INTERNAL} refused the request", type="invalid_request_error")


def stored_rows(configuration, sql: str) -> list[str]:
    path = configuration.run_store.removeprefix("sqlite:///")
    with sqlite3.connect(path) as db:
        return [row[0] for row in db.execute(sql)]


def test_a_failed_runs_events_say_the_error_class_and_a_fixed_sentence_not_the_providers_answer(gateway, file_config):
    gateway.reply(refusal())
    live = []

    run = SupportAgent.ask("Hi", on_event=live.append)

    assert run.outcome == "failed"
    # The application's Run keeps the error itself (the spec: "inspect run.error").
    assert isinstance(run.error, HTTPError) and INTERNAL in str(run.error)
    # What a caller is sent: the live terminal event as JSON, and every stored event read back.
    assert live[-1].type == "run_error" and live[-1].data["message"] == SAFE_HTTP_MESSAGE
    assert event_json(live[-1])["error"] == {
        "class": "lg_core.errors:HTTPError",
        "name": "HTTPError",
        "message": SAFE_HTTP_MESSAGE,
        "attributes": {"status": 400, "retryable": False},
    }
    served = [event_json(event) for event in lg_core.get_execution(run.id).events()]
    assert served[-1]["message"] == SAFE_HTTP_MESSAGE and served[-1]["error_class"] == "HTTPError"
    assert INTERNAL not in json.dumps(served) and INTERNAL not in json.dumps(event_json(live[-1]))
    assert not [data for data in stored_rows(file_config, "SELECT data FROM lg_events") if INTERNAL in data]


def test_the_providers_answer_stays_in_the_stored_run_error_for_lg_runs_show(gateway, file_config):
    gateway.reply(refusal())

    run = SupportAgent.ask("Hi")

    [stored] = stored_rows(file_config, f"SELECT error FROM lg_runs WHERE id = '{run.id}'")
    assert INTERNAL in json.loads(stored)["message"]
    shown = CliRunner().invoke(app, ["runs", "show", run.id, "--store", file_config.run_store])
    assert shown.exit_code == 0, shown.output
    assert INTERNAL in shown.stdout and "HTTPError" in shown.stdout


def test_a_run_that_follows_its_stored_events_reports_the_stored_error(gateway, file_config):
    """A process that follows a run through its event log (a worker-run execution's ``on_event``)
    gets the caller-safe terminal event; its Run's ``error`` is still the error the store keeps."""
    gateway.reply(refusal())
    run = SupportAgent.ask("Hi")
    follower = Run(SupportAgent, run.invocation, file_config.runtime())

    for event in lg_core.get_execution(run.id).events():
        follower.deliver(event)

    assert follower.outcome == "failed"
    assert isinstance(follower.error, HTTPError) and follower.error.status == 400
    assert INTERNAL in str(follower.error)


def test_a_retried_model_calls_event_is_caller_safe_and_the_log_keeps_why(gateway, file_config, caplog):
    caplog.set_level(logging.INFO, logger="lg_core.engine")
    gateway.reply(
        openai_server.error(503, f"backend {INTERNAL} is overloaded", type="server_error"),
        openai_server.stream(openai_server.text_chunks("Done.")),
    )

    run = SupportAgent.ask("Hi")

    assert run.outcome == "completed", run.error
    [retry] = [event for event in run.events() if event.type == "model_retry"]
    assert retry.data["message"] == SAFE_HTTP_MESSAGE and retry.data["error_class"] == "HTTPError"
    assert not [data for data in stored_rows(file_config, "SELECT data FROM lg_events") if INTERNAL in data]
    assert "after HTTPError: provider connection 'gateway' (127.0.0.1) answered 503" in caplog.text
    assert INTERNAL in caplog.text  # the operator's log says why
    assert [entry["attributes"]["status"] for entry in run.diagnostics if entry["kind"] == "model_retry"] == [503]


class SupportDeskHook(Hook):
    def error_message(self, error, run):
        return f"Support is busy ({type(error).__name__})."


def test_a_hooks_error_message_is_what_a_retry_and_a_failure_say(server, tmp_path):
    configuration = lg_core.Configuration(run_store=f"sqlite:///{tmp_path / 'runs.db'}", hooks=[SupportDeskHook])
    with lg_core.with_configuration(configuration):
        use_connection("gateway:test-model", {"adapter": "openai", "api_key": "sk-test-caller-safe"}, server)
        server.reply(openai_server.error(503, f"backend {INTERNAL} is overloaded", type="server_error"), refusal())
        run = SupportAgent.ask("Hi")
        events = run.events()
    configuration.close()

    assert [event.data["message"] for event in events if event.type in ("model_retry", "run_error")] == [
        "Support is busy (HTTPError).",
        "Support is busy (HTTPError).",
    ]


def failing_turns(error):
    def turns(request):
        raise error

    return turns


@pytest.mark.parametrize(
    ("error", "message"),
    [
        (
            ContextWindowOverflowError(f"too long for {INTERNAL}"),
            "ContextWindowOverflowError: the conversation is longer than the model's context window.",
        ),
        (
            MalformedToolCallError(f"bad call from {INTERNAL}"),
            "MalformedToolCallError: the model made a tool call that could not be read.",
        ),
        (
            StructuredResultError(f"no schema at {INTERNAL}"),
            "StructuredResultError: the model's answer did not match the expected result.",
        ),
        (ToolLoopError(f"loop at {INTERNAL}"), "ToolLoopError: the model repeated the same tool call too many times."),
        (ProviderError(f"refused by {INTERNAL}"), "ProviderError: the request to the model provider failed."),
        (KeyError(INTERNAL), "KeyError: the run failed with an unexpected error."),
    ],
    ids=lambda value: type(value).__name__ if isinstance(value, BaseException) else "",
)
def test_each_error_class_has_its_fixed_sentence(file_config, script, error, message):
    agent = type("FailingAgent", (Agent,), {"model": script(failing_turns(error))})

    run = agent.ask("Hi")

    assert run.outcome == "failed"
    assert run.events()[-1].data["message"] == message
    assert not [data for data in stored_rows(file_config, "SELECT data FROM lg_events") if INTERNAL in data]


def test_a_deadline_says_the_fixed_sentence_and_a_cancellation_its_reason(file_config, script):
    def waits_past_the_deadline(request):
        raise HTTPError(f"slow down, {INTERNAL} is busy", status=429, retryable=True, retry_after=30)

    overdue = type("OverdueAgent", (Agent,), {"model": script(waits_past_the_deadline)}).ask("Hi", deadline=0.3)
    cancelled = type("CancelledAgent", (Agent,), {"model": script([{"text": "never"}])})
    token = lg_core.CancellationToken()
    token.cancel("the customer closed the chat")
    stopped = cancelled.ask("Hi", cancellation_token=token)

    assert isinstance(overdue.error, DeadlineExceededError) and INTERNAL in str(overdue.error)
    assert overdue.events()[-1].data["message"] == "DeadlineExceededError: the run reached its deadline."
    assert stopped.outcome == "cancelled"
    assert stopped.events()[-1].data["message"] == "the customer closed the chat"
    assert not [data for data in stored_rows(file_config, "SELECT data FROM lg_events") if INTERNAL in data]
