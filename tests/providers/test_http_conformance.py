"""What every HTTP adapter must do, whatever its wire format: one suite, run against each adapter.

As the run stores share one conformance suite (one interface,
several backends), the HTTP adapters share this one. Every test runs whole
agent runs against a local server speaking the adapter's format over real HTTP,
built by the adapter's :class:`~tests.providers.wire_formats.WireFormat`; what
is checked is what a user sees: outcomes, events, errors and their messages,
retries, and what the server received. A test of one adapter's own format or
options is in that adapter's module (``test_anthropic_http`` ...).
"""

from __future__ import annotations

import json
import re
import socket
import threading
import time
from http import HTTPStatus

import httpx
import pytest

import lg_core
from lg_core import (
    ConfigurationError,
    ContextWindowOverflowError,
    CredentialError,
    DeadlineExceededError,
    HTTPError,
    MalformedToolCallError,
    OutputLimitError,
    ProtocolError,
    ProviderError,
)
from tests.providers.agents import (
    SupportAgent,
    ToolAgent,
    TriageAgent,
    retries,
    retry_reasons,
    types,
    use_connection,
)
from tests.providers.conftest import adapter_id
from tests.providers.sse_server import html_reply, json_reply
from tests.providers.wire_formats import FORMATS, KEY, MODEL_ID

CONNECTION = "remote"


def connect(wire, server=None, **options):
    """Configure the ``remote`` connection, the agents' model, with ``wire``'s adapter, the suite's key and
    ``server`` (when given); ``options`` add to these, and an option given as None is left out."""
    use_connection(f"{CONNECTION}:{MODEL_ID}", {"adapter": wire.adapter, "api_key": KEY, **options}, server)


@pytest.fixture
def connection(config, wire, server):
    connect(wire, server)
    return server


def refusals():
    """``(wire, refusal)`` for every wire format and each of its refusals, for parametrize."""
    return [
        pytest.param(
            wire, refusal, id="-".join(str(part) for part in (wire.adapter, refusal.status, refusal.kind) if part)
        )
        for wire in FORMATS
        for refusal in wire.refusals
    ]


# -- answers -----------------------------------------------------------------------------------------


def test_a_streamed_answer_completes_the_run_with_its_usage(wire, connection):
    connection.reply(wire.stream(wire.text("Refunds take ", "30 days.", usage=(40, 7))))

    run = SupportAgent.ask("How long do refunds take?")

    assert run.outcome == "completed", run.error
    assert run.response == "Refunds take 30 days."
    assert (run.usage.input_tokens, run.usage.output_tokens) == (40, 7)
    assert len(connection.received) == 1


def test_an_answer_longer_than_max_response_bytes_fails_the_run_without_a_retry(config, wire, server):
    """A runaway stream fails its run instead of growing the process; the spec's option, default 50 MiB."""
    connect(wire, server, max_response_bytes=4096)
    server.reply(wire.stream(wire.text(*["x" * 1000] * 10, usage=(40, 7))))

    run = SupportAgent.ask("Say a lot")

    assert run.outcome == "failed"
    assert type(run.error) is ProviderError
    assert "passed max_response_bytes (4096 bytes)" in str(run.error)
    assert len(server.received) == 1


def test_stream_ask_yields_the_text_deltas_in_order_and_the_response_says_what_answered(wire, connection):
    pieces = ["Re", "funds ", "take ", "thirty ", "days", "."]
    connection.reply(wire.stream(wire.text(*pieces)))

    run = SupportAgent.stream_ask("How long?")
    events = list(run)

    assert run.outcome == "completed", run.error
    assert [e.data["text"] for e in events if e.type == "text_delta"] == pieces
    kinds = [e.type for e in events]
    assert kinds.index("message_start") < kinds.index("text_delta") < kinds.index("usage") < kinds.index("message_stop")
    response = next(e for e in events if e.type == "message_stop").data["response"]
    assert {name: response.metadata.get(name) for name in wire.response_metadata} == wire.response_metadata


def test_a_content_filter_stop_ends_the_turn_as_content_filter_with_what_was_said(wire, connection):
    connection.reply(wire.stream(wire.filtered("I can't help ", "with that.")))

    run = SupportAgent.stream_ask("Hi")
    events = list(run)

    assert run.outcome == "completed", run.error
    assert run.response == "I can't help with that."
    assert next(e for e in events if e.type == "message_stop").data["stop_reason"] == "content_filter"


def test_a_tool_call_streams_its_events_runs_the_tool_and_the_answer_follows(wire, connection):
    connection.reply(
        wire.stream(wire.tool_call("call_Abc1", "lookup", {"topic": "refunds"})),
        wire.stream(wire.text("Refunds: entry for refunds.")),
    )

    run = ToolAgent.stream_ask("Can I get a refund?")
    events = list(run)

    assert run.outcome == "completed", run.error
    assert run.response == "Refunds: entry for refunds."
    call_events = [(e.type, dict(e.data)) for e in events if e.data.get("id") == "call_Abc1"]
    assert call_events[0] == ("tool_call_start", {"id": "call_Abc1", "name": "lookup"})
    assert json.loads("".join(d["arguments"] for kind, d in call_events if kind == "tool_call_delta")) == {
        "topic": "refunds"
    }
    assert ("tool_call_stop", {"id": "call_Abc1", "name": "lookup", "input": {"topic": "refunds"}}) in call_events
    assert len(connection.received) == 2
    assert "entry for refunds" in json.dumps(connection.received[1].body)


# -- errors and retries ------------------------------------------------------------------------------


def test_a_rate_limit_is_retried_and_announced_with_model_retry(wire, connection):
    message = "Rate limit reached for requests per minute. Please try again in 20ms."
    connection.reply(wire.error(429, message), wire.stream(wire.text("Done.")))

    run = SupportAgent.ask("Hi")

    assert run.outcome == "completed", run.error
    assert run.response == "Done."
    assert len(connection.received) == 2
    [retry] = retries(run)
    assert retry.data["error_class"] == "HTTPError"
    assert f"429 Too Many Requests: {message.rstrip('.')}" in retry_reasons(run)[0]
    assert 429 not in wire.kinds or f"({wire.kinds[429]})" in retry_reasons(run)[0]


def test_a_rate_limit_waits_as_long_as_retry_after_asks(wire, connection):
    """Retried at once, a limit that resets in a second refuses again: the wait the server asks for is kept."""
    connection.reply(wire.error(429, "Rate limit reached.", retry_after="1"), wire.stream(wire.text("Done.")))

    run = SupportAgent.ask("Hi")

    assert run.outcome == "completed", run.error
    first, second = connection.received
    assert second.at - first.at >= 1.0  # the backoff alone would have waited 0.25 s


def test_a_rate_limit_that_keeps_refusing_fails_the_run_with_the_wait_it_asked_for(wire, connection):
    connection.reply(
        *[
            wire.error(429, "Number of request tokens has exceeded your per-minute rate limit", retry_after="0.2")
            for _ in range(3)
        ]
    )

    run = SupportAgent.ask("Hi")

    assert run.outcome == "failed"
    assert isinstance(run.error, HTTPError)
    assert (run.error.status, run.error.retryable, run.error.retry_after) == (429, True, 0.2)
    assert getattr(run.error, "error_type", None) == wire.error_type(429)
    assert types(run).count("model_retry") == 2
    assert len(connection.received) == 3


def test_server_errors_are_retried(wire, connection):
    connection.reply(
        wire.error(500, "Internal server error"),
        wire.error(503, "The model is overloaded. Please try again later.", retry_after="0.1"),
        wire.stream(wire.text("Done.")),
    )

    run = SupportAgent.ask("Hi")

    assert run.outcome == "completed", run.error
    assert types(run).count("model_retry") == 2
    assert len(connection.received) == 3


@pytest.mark.parametrize(("wire", "refusal"), refusals())
def test_a_refused_request_fails_the_run_at_once_with_the_servers_message_and_never_the_key(wire, refusal, connection):
    connection.reply(wire.refused(refusal))

    run = SupportAgent.ask("Hi")

    assert run.outcome == "failed"
    assert isinstance(run.error, HTTPError)
    assert (run.error.status, run.error.retryable) == (refusal.status, False)
    assert getattr(run.error, "error_type", None) == wire.error_type(refusal.status, refusal.kind)
    assert {name: getattr(run.error, name, None) for name in wire.error_facts} == wire.error_facts
    message = str(run.error)
    assert f"{refusal.status} {HTTPStatus(refusal.status).phrase}: " in message
    assert refusal.message.replace(KEY, "[redacted]").rstrip(".") in message
    assert refusal.kind is None or f"({refusal.kind})" in message
    assert refusal.advice is None or refusal.advice in message
    assert KEY not in message and KEY not in run.error.body
    assert len(connection.received) == 1
    assert "model_retry" not in types(run)


def test_a_prompt_longer_than_the_context_window_is_a_context_window_overflow(wire, connection):
    connection.reply(wire.refused(wire.overflow))

    run = SupportAgent.ask("Hi")

    assert type(run.error) is ContextWindowOverflowError
    assert wire.overflow.message in str(run.error)
    assert run.error.retryable is False
    assert len(connection.received) == 1


def test_a_transient_error_mid_stream_is_retried_and_the_partial_text_announced(wire, connection):
    partial = [*wire.partial("Partial "), wire.error_event("The model is overloaded", transient=True)]
    connection.reply(wire.stream(partial), wire.stream(wire.text("Full answer.")))

    run = SupportAgent.stream_ask("Hi")
    events = list(run)

    assert run.outcome == "completed", run.error
    assert run.response == "Full answer."
    retry = next(e for e in events if e.type == "model_retry")
    assert retry.data["partial_text"] is True
    assert retry.data["error_class"] == "ProviderError"
    kind = wire.event_kinds[0]
    assert (
        "reported an error mid-stream: The model is overloaded" + (f" ({kind})" if kind else "")
        in retry_reasons(run)[0]
    )


def test_an_error_mid_stream_that_is_not_transient_fails_the_run(wire, connection):
    failed = [*wire.partial("Hel"), wire.error_event("Output blocked by content filtering policy", transient=False)]
    connection.reply(wire.stream(failed))

    run = SupportAgent.ask("Hi")

    assert run.outcome == "failed"
    assert type(run.error) is ProviderError
    assert "Output blocked by content filtering policy" in str(run.error)
    assert (run.error.retryable, getattr(run.error, "error_type", None)) == (False, wire.event_kinds[1])
    assert len(connection.received) == 1


def test_a_connection_dropped_mid_stream_is_retried(wire, connection):
    connection.reply(wire.drop_after(wire.partial("Partial ", "answ")), wire.stream(wire.text("Full answer.")))

    run = SupportAgent.stream_ask("Hi")
    events = list(run)

    assert run.outcome == "completed", run.error
    assert run.response == "Full answer."
    kinds = [e.type for e in events]
    retry = events[kinds.index("model_retry")]
    assert retry.data["partial_text"] is True
    assert f"the connection to provider connection '{CONNECTION}'" in retry_reasons(run)[0]
    assert kinds.index("text_delta") < kinds.index("model_retry")  # the superseded deltas came first


def test_a_connection_that_keeps_dropping_fails_the_run_after_the_retries(wire, connection):
    connection.reply(*[wire.drop_after(wire.partial("Part")) for _ in range(3)])

    run = SupportAgent.ask("Hi")

    assert run.outcome == "failed"
    assert isinstance(run.error, HTTPError)
    assert run.error.retryable is True and run.error.status is None
    assert len(connection.received) == 3


def test_a_refused_connection_is_retried_then_fails_the_run(config, wire):
    with socket.socket() as probe:  # a port with nobody listening
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    connect(wire, base_url=f"http://127.0.0.1:{port}", allow_insecure_http=True)

    run = SupportAgent.ask("Hi")

    assert run.outcome == "failed"
    assert isinstance(run.error, HTTPError) and run.error.retryable
    assert f"connection to provider connection '{CONNECTION}'" in str(run.error)
    assert types(run).count("model_retry") == 2


def test_a_proxys_error_page_is_an_http_error_quoting_it(wire, connection):
    connection.reply(*[html_reply(502, "<html><body>502 Bad Gateway</body></html>") for _ in range(3)])

    run = SupportAgent.ask("Hi")

    assert isinstance(run.error, HTTPError)
    assert (run.error.status, run.error.retryable) == (502, True)
    assert "<html><body>502 Bad Gateway</body></html>" in str(run.error)


def test_a_json_error_answered_with_200_is_a_protocol_error_keeping_its_message_without_the_key(wire, connection):
    """A proxy that ignored the request for a stream, or a server that reports errors with 200:
    the body's message is the only clue the user gets."""
    connection.reply(json_reply(200, wire.error_body(f"bad key {KEY}")))

    run = SupportAgent.ask("Hi")

    assert run.outcome == "failed"
    assert type(run.error) is ProtocolError
    assert "did not answer with an event stream (status 200): bad key [redacted]" in str(run.error)
    assert KEY not in str(run.error)
    assert run.error.retryable is False
    assert len(connection.received) == 1


# -- malformed streams ----------------------------------------------------------------------------------


def test_an_event_that_is_not_json_fails_the_run_with_a_protocol_error(wire, connection):
    connection.reply(wire.stream([*wire.partial("Hel"), wire.not_json()]))

    run = SupportAgent.ask("Hi")

    assert run.outcome == "failed"
    assert type(run.error) is ProtocolError
    assert "not JSON" in str(run.error)
    assert len(connection.received) == 1


def test_a_stream_that_ends_early_is_retried(wire, connection):
    """The server closed the body cleanly but early: the answer is incomplete, and another try may finish it."""
    connection.reply(
        wire.stream(wire.partial("Partial ", "answ"), complete=False), wire.stream(wire.text("Full answer."))
    )

    run = SupportAgent.ask("Hi")

    assert run.outcome == "completed", run.error
    assert run.response == "Full answer."
    [retry] = retries(run)
    assert wire.incomplete_says in retry_reasons(run)[0]


def test_a_stream_that_keeps_ending_early_fails_the_run_after_the_retries(wire, connection):
    connection.reply(*[wire.stream(wire.partial("Part"), complete=False) for _ in range(3)])

    run = SupportAgent.ask("Hi")

    assert run.outcome == "failed"
    assert isinstance(run.error, HTTPError) and run.error.retryable and run.error.status is None
    assert len(connection.received) == 3


def test_a_stream_that_ends_without_an_answer_is_retried_not_completed_empty(wire, connection):
    """No text, no tool call, no stop reason: the generation failed somewhere, so the run must not
    complete with an empty answer."""
    connection.reply(wire.stream(wire.empty()), wire.stream(wire.text("Full answer.")))

    run = SupportAgent.ask("Hi")

    assert run.outcome == "completed", run.error
    assert run.response == "Full answer."
    [retry] = retries(run)
    assert retry.data["error_class"] == "ProtocolError"
    assert "ended without an answer" in retry_reasons(run)[0]


def test_a_stream_that_keeps_ending_without_an_answer_fails_the_run(wire, connection):
    connection.reply(*[wire.stream(wire.empty()) for _ in range(3)])

    run = SupportAgent.ask("Hi")

    assert run.outcome == "failed"
    assert type(run.error) is ProtocolError and run.error.retryable
    assert len(connection.received) == 3


def test_tool_arguments_that_are_not_a_json_object_fail_the_run_as_a_malformed_tool_call(wire, connection):
    connection.reply(wire.stream(wire.malformed_tool_call("lookup")))

    run = ToolAgent.ask("Refunds?")

    assert run.outcome == "failed"
    assert type(run.error) is MalformedToolCallError
    assert "lookup" in str(run.error)


@pytest.mark.parametrize("wire", [wire for wire in FORMATS if wire.cut_tool_call("lookup") is not None], ids=adapter_id)
def test_a_tool_call_cut_off_by_the_output_limit_is_an_output_limit_error(wire, connection):
    """The call cannot run, and the fix is the limit (Gemini sends every call whole, so never cuts one)."""
    connection.reply(wire.stream(wire.cut_tool_call("lookup")))

    run = ToolAgent.ask("Refunds?", settings={"max_tokens": 8})

    assert run.outcome == "failed"
    assert type(run.error) is OutputLimitError
    assert "lookup" in str(run.error) and "max_tokens" in str(run.error)
    assert len(connection.received) == 1
    assert run.usage.output_tokens > 0, "the cut answer's tokens were spent: its usage counts though the turn failed"


def test_an_answer_the_output_limit_stopped_while_reasoning_fails_the_run_with_an_output_limit_error(wire, connection):
    """No text and no tool call: the limit stopped the agent before it answered (the spec's OutputLimitError),
    so the run fails instead of completing with an empty answer, and is not repaired or retried."""
    connection.reply(wire.stream(wire.reasoning_cut_off("The customer asks about refunds; ", "policy says")))

    run = SupportAgent.ask("Refunds?", settings={"max_tokens": 400})

    assert run.outcome == "failed"
    assert type(run.error) is OutputLimitError
    assert "output token limit (stop reason max_tokens) before it gave an answer" in str(run.error)
    assert len(connection.received) == 1
    record = stored(run)
    assert record.status == "failed" and record.response is None
    assert record.error["name"] == "OutputLimitError"
    assert run.usage.output_tokens > 0 or run.usage.reasoning_tokens > 0, "the spent tokens are counted"


def test_text_the_output_limit_cut_off_is_an_answer_the_run_completes_with(wire, connection):
    """Text that began is what the model answered; the stop reason tells the caller it was cut off."""
    connection.reply(wire.stream(wire.text_cut_off("Refunds are available within ", "thirty")))

    run = SupportAgent.stream_ask("Refunds?", settings={"max_tokens": 8})
    events = list(run)

    assert run.outcome == "completed", run.error
    assert run.response == "Refunds are available within thirty"
    assert run.result.stop_reason == "max_tokens"
    assert next(e for e in events if e.type == "message_stop").data["stop_reason"] == "max_tokens"
    assert stored(run).status == "completed"


def test_a_structured_result_cut_off_by_the_output_limit_fails_the_run_without_a_repair(wire, connection):
    """A JSON answer cut short (provider strategy), or text before any submit call (tool strategy): another
    attempt under the same limit would be cut off again, so the limit is named, not a repair asked for."""
    connection.reply(wire.stream(wire.text_cut_off('{"category": "deliv')))

    run = TriageAgent.ask("My package is missing.", settings={"max_tokens": 6})

    assert run.outcome == "failed"
    assert type(run.error) is OutputLimitError
    assert "output token limit (stop reason max_tokens) before it gave a valid result for the schema 'result'" in str(
        run.error
    )
    assert "structured_result_repair" not in types(run)
    assert len(connection.received) == 1
    assert stored(run).error["name"] == "OutputLimitError"


# -- cancellation and deadlines ------------------------------------------------------------------------


@pytest.mark.timeout(60)
def test_cancelling_mid_stream_stops_the_run_between_events(wire, connection):
    released = threading.Event()
    connection.reply(
        wire.stream(wire.text("First ", "second ", "third."), hold=released, hold_after=wire.first_piece_at)
    )

    run = SupportAgent.stream_ask("Hi")
    seen = []
    try:
        for event in run:
            seen.append(event.type)
            if event.type == "text_delta":
                run.cancel("user left")
    finally:
        released.set()

    assert run.outcome == "cancelled"
    assert seen.count("text_delta") == 1
    assert "message_stop" not in seen


@pytest.mark.timeout(60)
def test_cancelling_while_the_server_stalls_ends_the_blocked_read(wire, connection):
    """The server sends nothing more until the test ends: only shutting the socket can stop the read."""
    stalled = threading.Event()
    connection.reply(wire.stream(wire.text("First ", "never sent."), hold=stalled, hold_after=wire.first_piece_at))
    run = SupportAgent.stream_ask("Hi")
    try:
        for event in run:
            if event.type == "text_delta":
                run.cancel("user left")
    finally:
        stalled.set()

    assert run.outcome == "cancelled"
    assert "model_retry" not in types(run)


def _cancel_when(arrived, run):
    """Cancel ``run`` from another thread once the server has the request (its worker is then blocked)."""

    def cancel():
        if arrived.wait(30):
            run.cancel("user left")

    canceller = threading.Thread(target=cancel, daemon=True)
    canceller.start()
    return canceller


@pytest.mark.timeout(60)
@pytest.mark.parametrize("warm", [False, True], ids=["new connection", "kept-alive connection"])
def test_cancelling_while_waiting_for_the_response_headers_ends_the_wait(config, wire, server, warm):
    """An overloaded endpoint may not even send headers: the cancel must not wait for the read timeout,
    and the abandoned connection must not serve the next request."""
    connect(wire, server, timeout=40)
    if warm:  # the stalled request then reuses this request's connection
        server.reply(wire.stream(wire.text("Warm.")))
        assert SupportAgent.ask("Hi").outcome == "completed"
    arrived, released, left = threading.Event(), threading.Event(), threading.Event()
    server.reply(
        wire.stall_headers(wire.text("Too late."), arrived=arrived, until=released, left=left),
        wire.stream(wire.text("Next.")),
    )
    started = time.monotonic()
    try:
        run = SupportAgent.stream_ask("Hi")
        canceller = _cancel_when(arrived, run)
        list(run)
        elapsed = time.monotonic() - started
        if not warm:  # a connection opened for the request is shut at once, so nothing waits on it
            assert left.wait(30)
    finally:
        released.set()
    canceller.join(30)

    assert run.outcome == "cancelled"
    assert elapsed < 20  # half the read timeout: before, the wait lasted all 40 s
    assert "model_retry" not in types(run)
    after = SupportAgent.ask("Hi again")
    assert after.response == "Next.", after.error
    assert server.received[-1].port != server.received[-2].port


@pytest.mark.timeout(60)
def test_a_deadline_ends_the_wait_for_the_response_headers(wire, connection):
    """The request must reach the server before the deadline: usually 0.1 s, but on a
    loaded machine now and then more than half a second, so the deadline is 2 s."""
    arrived, released = threading.Event(), threading.Event()
    connection.reply(wire.stall_headers(wire.text("Too late."), arrived=arrived, until=released))
    try:
        run = SupportAgent.ask("Hi", deadline=2)
    finally:
        released.set()

    assert arrived.is_set(), "the deadline passed before the request reached the server"
    assert run.outcome == "partial"
    assert isinstance(run.error, DeadlineExceededError)
    assert "model_retry" not in types(run)


def stalled_stream(wire, released):
    """A stream that sends its first piece, then nothing until ``released`` is set."""
    return wire.stream(wire.text("First ", "never sent."), hold=released, hold_after=wire.first_piece_at)


def stream_kept_alive(wire, released):
    """A stream that sends its first piece, then only keep-alive comments (Anthropic: pings) until ``released``
    is set: each resets the read timeout and yields no event, so only the deadline itself can end the wait."""
    return wire.keep_alive(wire.text("First ", "too late."), until=released, after=wire.first_piece_at)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("waiting", [stalled_stream, stream_kept_alive], ids=["stalled", "kept alive"])
def test_a_deadline_ends_a_stream_that_sends_nothing_more_as_partial(wire, connection, waiting):
    released = threading.Event()
    connection.reply(waiting(wire, released))
    try:
        run = SupportAgent.ask("Hi", deadline=0.5)
    finally:
        released.set()

    assert run.outcome == "partial"
    assert isinstance(run.error, DeadlineExceededError)
    assert "model_retry" not in types(run)


# -- keep-alives without data ------------------------------------------------------------------------------

IDLE_TIMEOUT = 1  # the connection's timeout in these tests: a kept-alive stream is given up after it


def only_keep_alives(wire, released, after=0):
    """A stream that sends ``after`` events of an answer, then only keep-alive comments (Anthropic: pings),
    every 50 ms, until ``released`` is set or the client goes away."""
    return wire.keep_alive(wire.text("First ", "never sent."), until=released, after=after)


def stored(run):
    """The run as the run store recorded it."""
    return lg_core.current_runtime().store.load_run(run.id)


@pytest.mark.timeout(30)
def test_a_stream_sending_only_keep_alives_for_the_timeout_is_given_up_and_retried(config, wire, server):
    """Each keep-alive restarts httpx's read timeout: without a deadline only the idle limit ends the wait."""
    connect(wire, server, timeout=IDLE_TIMEOUT)
    released = threading.Event()
    server.reply(only_keep_alives(wire, released), wire.stream(wire.text("Answered.")))
    try:
        run = SupportAgent.ask("Hi")
    finally:
        released.set()

    assert run.outcome == "completed", run.error
    assert run.response == "Answered."
    [retry] = retries(run)
    assert retry.data["error_class"] == "HTTPError"
    [reason] = retry_reasons(run)
    assert f"sent no data for {IDLE_TIMEOUT} s (the connection's timeout), only keep-alives" in reason
    assert retry.data["partial_text"] is False
    assert len(server.received) == 2


@pytest.mark.timeout(30)
def test_keep_alives_after_some_text_are_given_up_and_the_partial_text_announced(config, wire, server):
    connect(wire, server, timeout=IDLE_TIMEOUT)
    released = threading.Event()
    server.reply(only_keep_alives(wire, released, after=wire.first_piece_at), wire.stream(wire.text("Answered.")))
    try:
        run = SupportAgent.ask("Hi")
    finally:
        released.set()

    assert run.outcome == "completed", run.error
    assert run.response == "Answered."
    [retry] = retries(run)
    [reason] = retry_reasons(run)
    assert "only keep-alives" in reason
    assert retry.data["partial_text"] is True


@pytest.mark.timeout(30)
def test_a_stream_that_keeps_sending_only_keep_alives_fails_the_run_after_the_retries(config, wire, server):
    connect(wire, server, timeout=IDLE_TIMEOUT)
    released = threading.Event()
    server.reply(*[only_keep_alives(wire, released) for _ in range(3)])
    try:
        run = SupportAgent.ask("Hi")
    finally:
        released.set()

    assert run.outcome == "failed"
    assert type(run.error) is HTTPError
    assert run.error.retryable is True and run.error.status is None
    assert "only keep-alives" in str(run.error)
    assert types(run).count("model_retry") == 2
    assert len(server.received) == 3
    record = stored(run)
    assert record.status == "failed"
    assert record.error["name"] == "HTTPError"


def test_keep_alives_between_pieces_of_data_never_add_up_to_the_timeout(config, wire, server):
    """The idle time starts again with every event that carries data: four waits of 0.6 s (2.4 s in all)
    under a 2 s timeout do not end the stream, whatever keep-alives fill them."""
    connect(wire, server, timeout=2)
    server.reply(_keep_alive_before_each_event(wire, wire.text("Slow ", "but ", "steady."), pause=0.6, events=4))

    run = SupportAgent.ask("Hi")

    assert run.outcome == "completed", run.error
    assert run.response == "Slow but steady."
    assert retries(run) == []


def _keep_alive_before_each_event(wire, answer, *, pause, events):
    """A stream of ``answer`` where the first ``events`` frames that carry data each come after ``pause`` seconds
    of keep-alives, sent every 50 ms."""
    frames, keep_alive = wire.framing.encoded(answer), wire.framing.comment

    def reply(handler):
        handler.start_stream()
        paused = 0
        for frame in frames:
            if frame != keep_alive and paused < events:
                paused += 1
                until = time.monotonic() + pause
                while time.monotonic() < until:
                    handler.write_chunk(keep_alive)
                    time.sleep(0.05)
            handler.write_chunk(frame)
        handler.end_chunks()

    return reply


# -- credentials -----------------------------------------------------------------------------------------


def test_a_missing_api_key_fails_the_run_with_a_credential_error_before_any_request(config, wire, server, monkeypatch):
    monkeypatch.delenv("LG_TEST_MISSING_KEY", raising=False)
    connect(wire, server, api_key=None, api_key_env="LG_TEST_MISSING_KEY")

    run = SupportAgent.ask("Hi")

    assert run.outcome == "failed"
    assert isinstance(run.error, CredentialError)
    assert "$LG_TEST_MISSING_KEY" in str(run.error)
    assert server.received == []


def test_a_connection_without_any_key_names_the_adapters_variable(config, wire, server, monkeypatch):
    monkeypatch.delenv(wire.key_variable, raising=False)
    connect(wire, server, api_key=None)

    run = SupportAgent.ask("Hi")

    assert run.outcome == "failed"
    assert isinstance(run.error, CredentialError)
    assert wire.no_key_says in str(run.error)
    assert server.received == []


def test_the_key_is_read_from_the_named_environment_variable_and_kept_out_of_reprs(config, wire, server, monkeypatch):
    monkeypatch.setenv("LG_TEST_KEY", "sk-from-env")
    connect(wire, server, api_key=None, api_key_env="LG_TEST_KEY")
    server.reply(wire.stream(wire.text("ok")))

    assert SupportAgent.ask("Hi").response == "ok"
    assert wire.sent_key(server.received[0].headers) == "sk-from-env"
    provider = wire.provider_class("direct", {"api_key": KEY})
    assert KEY not in repr(provider.settings) and KEY not in repr(provider)


def test_a_key_read_with_a_trailing_newline_is_sent_without_it(config, wire, server):
    """A key pasted or read from a file often ends in a newline; as a header value it would be illegal."""
    connect(wire, server, api_key=KEY + "\n")
    server.reply(wire.stream(wire.text("ok")))

    run = SupportAgent.ask("Hi")

    assert run.outcome == "completed", run.error
    assert wire.sent_key(server.received[0].headers) == KEY


def test_a_header_value_that_is_not_valid_http_fails_the_run_without_showing_it(config, wire, server):
    """httpx quotes the illegal value in its error; an Azure-style key header must not end up in the run."""
    connect(wire, server, headers={"api-key": "azure-key-7f3e9\r\nX-Injected: 1"})

    run = SupportAgent.ask("Hi")

    assert run.outcome == "failed"
    assert "azure-key-7f3e9" not in str(run.error)
    assert all("azure-key-7f3e9" not in str(event.data) for event in run.events())
    assert "model_retry" not in types(run)
    assert server.received == []


@pytest.mark.parametrize("headers", [{"X-Title": "Café Support"}, {"X-Titlé": "Support"}])
def test_a_header_that_is_not_ascii_is_a_configuration_error(config, wire, server, headers):
    """httpx sends header values as ASCII: anything else is a ConfigurationError naming the header,
    raised before any request is sent, not a bare UnicodeEncodeError in the middle of a run."""
    connect(wire, server, headers=headers)

    with pytest.raises(ConfigurationError, match=r"header 'X-Titl.' must be ASCII text"):
        SupportAgent.ask("Hi")
    assert server.received == []


def test_a_key_that_is_not_ascii_fails_the_run_without_showing_it(config, wire, server, monkeypatch):
    """A key pasted with a typographic quote; its characters stay out of the message."""
    monkeypatch.setenv("LG_TEST_PASTED_KEY", "sk-test-Zq7t0p\u2019")
    connect(wire, server, api_key=None, api_key_env="LG_TEST_PASTED_KEY")

    run = SupportAgent.ask("Hi")

    assert run.outcome == "failed"
    assert isinstance(run.error, CredentialError)
    assert "the API key in $LG_TEST_PASTED_KEY has characters that are not ASCII" in str(run.error)
    assert "Zq7t0p" not in str(run.error)
    assert server.received == []


def test_a_configured_key_that_is_not_ascii_names_the_option(config, wire, server):
    connect(wire, server, api_key="sk-tést")

    run = SupportAgent.ask("Hi")

    assert isinstance(run.error, CredentialError)
    assert "the API key in api_key has characters that are not ASCII" in str(run.error)
    assert server.received == []


# -- connection options -------------------------------------------------------------------------------


def test_the_default_endpoint_is_the_providers_and_the_transport_replaces_the_network(config, wire):
    """The transport is the extension point: an httpx.MockTransport needs no server."""
    body = wire.framing.body(wire.text("Mocked."))
    seen = []

    def handle(request):
        seen.append((str(request.url), wire.sent_key(request.headers)))
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=body)

    connect(wire, transport=httpx.MockTransport(handle))

    assert SupportAgent.ask("Hi").response == "Mocked."
    assert seen == [(wire.default_url, KEY)]


BAD_OPTIONS = [
    ({"base_url": "http://models.example.test/v1", "allow_insecure_http": None}, lambda wire: "plain HTTP"),
    (
        {"base_url": "models.example.test/v1"},
        lambda wire: f"base_url must be a URL like {re.escape(wire.default_base_url)}",
    ),
    (
        {"temprature": 0.2},
        lambda wire: rf"unknown option 'temprature'; the {wire.adapter} adapter accepts: .*{wire.own_option}",
    ),
    ({"timeout": 0}, lambda wire: "timeout must be a positive number"),
    ({"timeout": -1}, lambda wire: "timeout must be a positive number"),
    ({"headers": {"X-Retries": 3}}, lambda wire: "headers must map header names to strings"),
    ({"transport": "mock"}, lambda wire: "transport must be an httpx transport"),
    ({"capabilities": {"vision": True}}, lambda wire: "capabilities: .*vision"),
    ({"max_response_bytes": 0}, lambda wire: "max_response_bytes must be a positive number of bytes, got 0"),
    ({"max_response_bytes": "50MB"}, lambda wire: "max_response_bytes must be a positive number of bytes, got '50MB'"),
]


@pytest.mark.parametrize(
    ("options", "problem"),
    BAD_OPTIONS,
    ids=[re.sub(r"\W+", "-", str(options)).strip("-") for options, _ in BAD_OPTIONS],
)
def test_bad_connection_options_are_configuration_errors_naming_the_option(config, wire, server, options, problem):
    connect(wire, server, **options)

    with pytest.raises(ConfigurationError, match=problem(wire)):
        SupportAgent.ask("Hi")
    assert server.received == []
