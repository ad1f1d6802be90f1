"""The vertex_ai adapter: the Gemini adapter's requests and streams, sent to a Google Cloud project
with an access token, against a local server speaking Vertex AI's streamGenerateContent format."""

from __future__ import annotations

import httpx
import pytest

from lg_core import Agent, ConfigurationError, CredentialError, HTTPError, configure
from lg_core.providers import VertexAIProvider
from tests.providers.agents import LookupTool
from tests.providers.gemini_server import (
    call,
    calls_answer,
    encode,
    error,
    serve,
    stream,
    text_answer,
)

PROJECT = "support-bots"
VERTEX_PATH = (
    f"/v1/projects/{PROJECT}/locations/us-central1/publishers/google/models/"
    "gemini-2.5-flash:streamGenerateContent?alt=sse"
)


@pytest.fixture
def server():
    yield from serve()


class Tokens:
    """A credential resolver as an application writes one: here, a new token for every request."""

    def __init__(self):
        self.issued = []

    def __call__(self):
        token = f"ya29.a0AfB_token-{len(self.issued) + 1}"
        self.issued.append(token)
        return token


@pytest.fixture
def tokens():
    return Tokens()


@pytest.fixture
def vertex(config, server, tokens):
    configure(
        providers={
            "vertex": {
                "adapter": "vertex_ai",
                "project": PROJECT,
                "location": "us-central1",
                "base_url": server.base_url,
                "allow_insecure_http": True,
                "credential_resolver": tokens,
            }
        }
    )
    return server


def vertex_chunks(chunks):
    """Vertex adds ``createTime`` and the traffic type to each chunk Google's API sends."""
    return [
        {
            **item,
            "usageMetadata": {**item["usageMetadata"], "trafficType": "ON_DEMAND"},
            "createTime": "2026-03-10T14:54:45.066123Z",
        }
        for item in chunks
    ]


class VertexAgent(Agent):
    model = "vertex:gemini-2.5-flash"
    system_prompt = "Answer briefly."
    tools = [LookupTool]


def test_a_run_with_a_tool_call_goes_to_the_project_with_a_fresh_token_for_each_request(vertex, tokens):
    vertex.reply(
        stream(vertex_chunks(calls_answer(call("lookup", {"topic": "refunds"})))),
        stream(vertex_chunks(text_answer("Refunds take ", "30 days."))),
    )

    run = VertexAgent.ask("Can I get a refund?")

    assert run.outcome == "completed", run.error
    assert run.response == "Refunds take 30 days."
    first, second = vertex.received
    assert [first.path, second.path] == [VERTEX_PATH, VERTEX_PATH]
    assert [first.headers["authorization"], second.headers["authorization"]] == [
        f"Bearer {token}" for token in tokens.issued
    ]
    assert "x-goog-api-key" not in first.headers
    assert first.body["systemInstruction"] == {"parts": [{"text": "Answer briefly."}]}
    assert second.body["contents"][1:] == [
        {"role": "model", "parts": [{"functionCall": {"name": "lookup", "args": {"topic": "refunds"}}}]},
        {
            "role": "user",
            "parts": [{"functionResponse": {"name": "lookup", "response": {"output": "entry for refunds"}}}],
        },
    ]


def test_a_refused_token_fails_the_run_saying_where_the_token_comes_from_and_never_showing_it(vertex, tokens):
    message = (
        "Request had invalid authentication credentials. "
        "Expected OAuth 2 access token, login cookie or other valid authentication credential."
    )
    vertex.reply(error(401, "UNAUTHENTICATED", f"{message} (got ya29.a0AfB_token-1)"))

    run = VertexAgent.ask("Hi")

    assert run.outcome == "failed"
    assert isinstance(run.error, HTTPError)
    assert (run.error.status, run.error.retryable, run.error.error_type) == (401, False, "UNAUTHENTICATED")
    assert str(run.error).endswith(
        "(UNAUTHENTICATED). Check the connection's access_token, access_token_env or credential_resolver "
        "(an access token expires after an hour)."
    )
    assert "ya29.a0AfB_token-1" not in str(run.error) and "ya29.a0AfB_token-1" not in run.error.body
    assert tokens.issued == ["ya29.a0AfB_token-1"]  # the error was cleaned without asking for another token


def test_the_token_comes_from_an_environment_variable_read_at_each_request(config, server, monkeypatch):
    configure(
        providers={
            "vertex": {
                "adapter": "vertex_ai",
                "project": PROJECT,
                "location": "us-central1",
                "base_url": server.base_url,
                "allow_insecure_http": True,
                "access_token_env": "LG_TEST_VERTEX_TOKEN",
            }
        }
    )
    server.reply(stream(text_answer("ok")))
    monkeypatch.setenv("LG_TEST_VERTEX_TOKEN", "ya29.from-gcloud\n")

    assert VertexAgent.ask("Hi").response == "ok"
    assert server.received[0].headers["authorization"] == "Bearer ya29.from-gcloud"

    monkeypatch.delenv("LG_TEST_VERTEX_TOKEN")
    run = VertexAgent.ask("Hi")
    assert isinstance(run.error, CredentialError)
    assert "$LG_TEST_VERTEX_TOKEN" in str(run.error) and "gcloud auth print-access-token" in str(run.error)
    assert len(server.received) == 1


def failing_resolver():
    raise RuntimeError("metadata server unreachable")


@pytest.mark.parametrize(
    ("options", "problem"),
    [
        ({}, "has no access token; add credential_resolver"),
        (
            {"credential_resolver": failing_resolver},
            "credential_resolver raised RuntimeError: metadata server unreachable",
        ),
        ({"credential_resolver": lambda: None}, "credential_resolver returned NoneType, not an access token string"),
    ],
)
def test_a_token_that_cannot_be_had_fails_the_run_with_a_credential_error_before_any_request(
    config, server, options, problem
):
    configure(
        providers={
            "vertex": {
                "adapter": "vertex_ai",
                "project": PROJECT,
                "base_url": server.base_url,
                "allow_insecure_http": True,
                **options,
            }
        }
    )

    run = VertexAgent.ask("Hi")

    assert run.outcome == "failed"
    assert isinstance(run.error, CredentialError)
    assert problem in str(run.error)
    assert server.received == []


@pytest.mark.parametrize(
    ("location", "url"),
    [
        (
            None,
            f"https://aiplatform.googleapis.com/v1/projects/{PROJECT}/locations/global/publishers/google/models/gemini-2.5-flash:streamGenerateContent?alt=sse",
        ),
        (
            "europe-west4",
            f"https://europe-west4-aiplatform.googleapis.com/v1/projects/{PROJECT}/locations/europe-west4/publishers/google/models/gemini-2.5-flash:streamGenerateContent?alt=sse",
        ),
    ],
)
def test_the_default_endpoint_is_the_locations_vertex_host(config, location, url):
    body = b"".join(encode(item) for item in text_answer("Mocked."))
    seen = []

    def handle(request):
        seen.append(str(request.url))
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=body)

    options = {
        "adapter": "vertex_ai",
        "project": PROJECT,
        "access_token": "ya29.fixed",
        "transport": httpx.MockTransport(handle),
    }
    if location:
        options["location"] = location
    configure(providers={"vertex": options})

    assert VertexAgent.ask("Hi").response == "Mocked."
    assert seen == [url]


@pytest.mark.parametrize(
    ("options", "problem"),
    [
        ({}, "needs project, the Google Cloud project id"),
        ({"project": PROJECT, "api_key": "AIza-key"}, "Vertex AI takes an OAuth access token, not an API key"),
        ({"project": PROJECT, "location": "us-central1.attacker.test"}, "location must be a Google Cloud location"),
        (
            {"project": PROJECT, "credential_resolver": "myapp_missing.auth:token"},
            "credential_resolver 'myapp_missing.auth:token' cannot be imported",
        ),
        ({"project": PROJECT, "credential_resolver": "os:sep"}, "credential_resolver 'os:sep' is not a function"),
        ({"project": PROJECT, "credential_resolver": 42}, "credential_resolver must be a function or an import path"),
        (
            {"project": PROJECT, "region": "us"},
            r"unknown option 'region'; the vertex_ai adapter accepts: .*credential_resolver.*location.*project",
        ),
        (
            {"project": PROJECT, "max_response_bytes": "1MB"},
            "max_response_bytes must be a positive number of bytes, got '1MB'",
        ),
        ({"project": PROJECT, "max_response_bytes": 0}, "max_response_bytes must be a positive number of bytes, got 0"),
        ({"project": PROJECT, "allow_insecure_http": "yes"}, "allow_insecure_http must be true or false"),
    ],
)
def test_bad_connection_options_are_configuration_errors_naming_the_option(config, options, problem):
    configure(providers={"vertex": {"adapter": "vertex_ai", **options}})

    with pytest.raises(ConfigurationError, match=problem):
        VertexAgent.ask("Hi")


def test_no_token_is_in_a_repr():
    provider = VertexAIProvider(
        "vertex", {"project": PROJECT, "access_token": "ya29.secret-token", "credential_resolver": lambda: "x"}
    )

    assert "ya29.secret-token" not in repr(provider.settings)
    assert "credential_resolver" not in repr(provider.settings)
