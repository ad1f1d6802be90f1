"""A connection's secrets never leave the adapter: not into the run store, a log line or an error.

The secrets are the API key, every value of ``headers``, a ``base_url``'s userinfo
and its query values. Each test makes a local server quote one of them the way a
real endpoint or gateway does (an error body, a response header, a malformed
status line), runs an agent on a SQLite file store, and looks where the text
ends up: the database file's bytes, the log records of every logger at DEBUG,
the error the application gets.
"""

from __future__ import annotations

import logging
import threading
import traceback
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest

from lg_core import ConfigurationError, HTTPError
from lg_core.providers import OpenAIProvider
from lg_core.providers._http.redaction import SecretLogFilter
from tests.providers.agents import SupportAgent, use_connection
from tests.providers.sse_server import body_reply
from tests.providers.wire_formats import KEY, MODEL_ID

SECRET = "gw-SENTINEL-7f3a9c2e51"  # what no byte of the store and no log line may hold
CONNECTION = "gateway"
API_PATHS = {
    "anthropic": "/v1/messages",
    "gemini": f"/v1beta/models/{MODEL_ID}:streamGenerateContent",
    "openai": "/v1/chat/completions",
    "openrouter": "/api/v1/chat/completions",
}


@pytest.fixture
def debug_log(caplog):
    """Every logger's records at DEBUG, httpx's and httpcore's included."""
    caplog.set_level(logging.DEBUG)
    return caplog


def connect(wire, server, **options):
    """The ``gateway`` connection on ``server`` with the suite's key; ``options`` add to it or replace it."""
    use_connection(f"{CONNECTION}:{MODEL_ID}", {"adapter": wire.adapter, "api_key": KEY, **options}, server)


def with_credentials(base_url: str, userinfo: str | None = None, query: str | None = None) -> str:
    """``base_url`` with ``userinfo`` before its host and ``query`` after its path."""
    scheme, rest = base_url.split("://", 1)
    return f"{scheme}://{userinfo + '@' if userinfo else ''}{rest}{'?' + query if query else ''}"


def store_bytes(configuration) -> bytes:
    """The SQLite run store as it is on disk: the database file and its write-ahead log."""
    path = Path(configuration.run_store.removeprefix("sqlite:///"))
    return b"".join(part.read_bytes() for part in (path, Path(f"{path}-wal")) if part.exists())


def test_a_header_value_the_endpoint_echoes_in_a_400_body_never_reaches_the_run_store(wire, server, file_config):
    connect(wire, server, headers={"X-Gateway-Key": SECRET})
    server.reply(wire.error(400, f"X-Gateway-Key {SECRET} is not valid for this route"))

    run = SupportAgent.ask("Hi")

    assert run.outcome == "failed" and isinstance(run.error, HTTPError)
    assert "X-Gateway-Key [redacted] is not valid" in str(run.error)
    assert SECRET not in str(run.error) and SECRET not in run.error.body
    assert server.received[0].headers["x-gateway-key"] == SECRET  # it was sent: only its echo is cleaned
    assert SECRET.encode() not in store_bytes(file_config)


def test_url_userinfo_and_query_values_are_sent_but_not_logged_stored_or_quoted(wire, server, file_config, debug_log):
    base_url = with_credentials(server.base_url, userinfo=f"relay:{SECRET}", query=f"key={SECRET}")
    connect(wire, server, base_url=base_url)
    server.reply(wire.error(401, f"relay key {SECRET} was revoked"))

    run = SupportAgent.ask("Hi")

    assert run.outcome == "failed" and "relay key [redacted] was revoked" in str(run.error)
    received = server.received[0]
    assert parse_qs(urlsplit(received.path).query)["key"] == [SECRET]
    assert received.headers["authorization"].startswith("Basic ")  # the userinfo, as httpx sends it
    assert "HTTP Request: POST" in debug_log.text and "key=[redacted]" in debug_log.text
    assert SECRET not in debug_log.text
    assert SECRET.encode() not in store_bytes(file_config)


def test_a_base_url_query_goes_after_the_request_path(wire, server, config):
    connect(wire, server, base_url=with_credentials(server.base_url, query="tenant=support&key=abc%2Fdef"))
    server.reply(wire.stream(wire.text("Hello.")))

    run = SupportAgent.ask("Hi")

    assert run.outcome == "completed", run.error
    path, _, query = server.received[0].path.partition("?")
    assert path == API_PATHS[wire.adapter]
    assert parse_qs(query)["tenant"] == ["support"] and parse_qs(query)["key"] == ["abc/def"]
    assert wire.adapter != "gemini" or parse_qs(query)["alt"] == ["sse"]  # the path's own query is kept


def malformed_status_line(handler):
    """A broken server quoting the credential in its status line: httpx's error then quotes it too."""
    handler.wfile.write(f"HTTP/1.1 2OO {SECRET}\r\n\r\n".encode())
    handler.wfile.flush()
    handler.close_connection = True


def test_a_transport_error_quoting_a_secret_is_redacted_with_the_errors_it_was_raised_from(
    wire, server, file_config, debug_log
):
    connect(wire, server, headers={"X-Gateway-Key": SECRET})
    server.reply(*[malformed_status_line] * 3)

    run = SupportAgent.ask("Hi")

    assert run.outcome == "failed" and isinstance(run.error, HTTPError) and run.error.retryable
    assert "illegal status line" in str(run.error) and "[redacted]" in str(run.error)
    assert SECRET not in "".join(
        traceback.format_exception(run.error)
    )  # the httpx and httpcore errors in its chain too
    assert SECRET not in debug_log.text
    assert SECRET.encode() not in store_bytes(file_config)


def test_a_response_header_echoing_a_secret_stays_out_of_the_debug_log(wire, server, config, debug_log):
    connect(wire, server, headers={"X-Gateway-Key": SECRET})
    echo = body_reply(403, b'{"error": "forbidden"}', content_type="application/json", headers={"X-Echo-Key": SECRET})
    server.reply(echo)

    SupportAgent.ask("Hi")

    assert "receive_response_headers.complete" in debug_log.text  # httpcore logged the headers, cleaned
    assert SECRET not in debug_log.text


@pytest.mark.parametrize(("value", "redacted"), [("x", False), ("abcd123", False), ("abcd1234", True)])
def test_a_value_shorter_than_eight_characters_is_not_searched_for(wire, server, config, value, redacted):
    connect(wire, server, api_key=value, headers={"X-Tenant": value})
    server.reply(wire.error(400, f"gw.example refused tenant {value}abcd123"))

    run = SupportAgent.ask("Hi")

    message = str(run.error)
    assert "gw.example refused tenant" in message  # ordinary text is never garbled
    assert ("tenant [redacted]abcd123" in message) is redacted
    assert (f"tenant {value}abcd123" in message) is not redacted


def test_a_refused_base_url_is_quoted_without_its_credentials(config):
    base_url = f"http://relay:{SECRET}@gw.example/v1?key={SECRET}&tenant=support"

    with pytest.raises(ConfigurationError) as refused:
        OpenAIProvider(CONNECTION, {"api_key": KEY, "base_url": base_url})

    assert "'http://[redacted]@gw.example/v1?key=[redacted]&tenant=[redacted]' is plain HTTP" in str(refused.value)
    assert SECRET not in str(refused.value)


def test_a_connections_repr_shows_no_header_value_or_base_url_credential(config):
    provider = OpenAIProvider(
        CONNECTION,
        {"api_key": KEY, "base_url": f"https://relay:{SECRET}@gw.example/v1", "headers": {"X-Gateway-Key": SECRET}},
    )

    assert SECRET not in repr(provider.settings) and KEY not in repr(provider.settings)
    assert "connection='gateway'" in repr(provider.settings)


def test_a_secret_within_a_longer_one_leaves_no_part_of_the_longer_one(wire, server, config):
    """Both are secrets: the longer is replaced whole, before the shorter could cut it in pieces."""
    inner = SECRET[:12]
    connect(wire, server, headers={"X-Gateway-Key": SECRET, "X-Tenant-Key": inner})
    server.reply(wire.error(400, f"keys {SECRET} and {inner}"))

    run = SupportAgent.ask("Hi")

    assert "keys [redacted] and [redacted]" in str(run.error)


def test_the_log_filter_can_be_entered_again_on_its_own_thread():
    """A response stream collected while the filter copies its watched set logs from its finalizer, on
    the same thread, into the filter: that call must go through instead of waiting for the filter's lock."""
    log_filter = SecretLogFilter()
    record = logging.LogRecord("httpcore.http11", logging.DEBUG, __file__, 1, "receive_response_body.failed", (), None)
    finished = threading.Event()

    def filter_while_held() -> None:
        with log_filter._lock:  # what a collection inside filter() finds
            log_filter.filter(record)
        finished.set()

    worker = threading.Thread(target=filter_while_held, daemon=True)
    worker.start()
    assert finished.wait(5), "the filter waited for a lock its own thread holds"
