"""The openrouter adapter's own format and options, against a local server speaking OpenRouter's
streaming format over real HTTP.

What every HTTP adapter must do (retries, errors, malformed streams, cancellation,
deadlines, credentials, the shared options) is checked for this one too by the
conformance suite, ``test_http_conformance``; this module checks what is OpenRouter's:
the key read from $OPENROUTER_API_KEY by default, attribution headers, cost and the
upstream provider, reasoning details, routing preferences, and the advice its error
statuses get. As for the other adapters, every test runs whole agent runs, so what
is checked is what a user sees: events, outcomes, errors, usage and cost, and what
the server received.
"""

from __future__ import annotations

import json

import pytest

from lg_core import (
    Agent,
    ConfigurationError,
    ContextWindowOverflowError,
    HTTPError,
    ProviderError,
    Tool,
    after_model_error,
    configure,
)
from tests.providers.agents import retries, retry_reasons, types
from tests.providers.openai_server import drop_after, stream
from tests.providers.openrouter_server import (
    PROCESSING,
    chunk,
    error,
    error_chunk,
    reasoning_chunk,
    serve,
    text_chunks,
    tool_call_chunks,
    usage_chunk,
)

KEY = "sk-or-v1-test-9f2c1e7d0secret"


@pytest.fixture
def server():
    yield from serve()


@pytest.fixture
def connection(config, server, monkeypatch):
    """The spec's connection, ``openrouter: {adapter: :openrouter}``, with the key in $OPENROUTER_API_KEY,
    pointed at the local server."""
    monkeypatch.setenv("OPENROUTER_API_KEY", KEY)
    configure(
        providers={
            "openrouter": openrouter_options(server, site_url="https://support.example.com", app_name="Support Console")
        }
    )
    return server


def openrouter_options(server, **options):
    return {"adapter": "openrouter", "base_url": server.base_url, "allow_insecure_http": True, **options}


class CustomerSupportAgent(Agent):
    model = "openrouter:openai/gpt-5.6-luna"
    system_prompt = "Answer customer questions clearly and concisely."


class OrderStatusTool(Tool):
    description = "Look up the status of an order."
    input_schema = {"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]}

    def call(self, input):
        return f"order {input['order_id']} shipped yesterday"


class OrderAgent(CustomerSupportAgent):
    model = "openrouter:anthropic/claude-sonnet-4.5"
    tools = [OrderStatusTool]


TRIAGE = {
    "type": "object",
    "properties": {"category": {"type": "string"}},
    "required": ["category"],
    "additionalProperties": False,
}


class TriageAgent(CustomerSupportAgent):
    result_schema = TRIAGE


class ErrorWatchingAgent(CustomerSupportAgent):
    """Records the provider errors the engine recovers from."""

    seen: list = []

    @after_model_error
    def note(self, payload):
        ErrorWatchingAgent.seen.append(payload["error"])


def response_of(run):
    [stop] = [event for event in run.events() if event.type == "message_stop"]
    return stop.data["response"]


# -- answers -----------------------------------------------------------------------------------------


def test_the_specs_first_agent_answers_with_only_the_key_in_the_environment(connection):
    connection.reply(stream(text_chunks("Yes, ", "before it ships.")))

    run = CustomerSupportAgent.ask("Can I change the address on my order?", settings={"temperature": 0.2})

    assert run.outcome == "completed", run.error
    assert run.response == "Yes, before it ships."
    [received] = connection.received
    assert received.path == "/api/v1/chat/completions"
    assert received.headers["authorization"] == f"Bearer {KEY}"
    assert received.headers["http-referer"] == "https://support.example.com"
    assert received.headers["x-title"] == "Support Console"
    assert received.body["model"] == "openai/gpt-5.6-luna"
    assert received.body["messages"][-1] == {"role": "user", "content": "Can I change the address on my order?"}
    assert (received.body["stream"], received.body["temperature"]) == (True, 0.2)
    assert "provider" not in received.body  # no routing preferences asked for: OpenRouter's defaults


def test_keep_alive_comments_are_skipped_and_the_usage_reports_its_cost(connection):
    """OpenRouter sends ``: OPENROUTER PROCESSING`` while the model is queued, and always ends with the usage."""
    connection.reply(
        stream(
            [
                PROCESSING,
                chunk(),
                PROCESSING,
                chunk({"role": "assistant", "content": "Refunds take 30 days."}),
                chunk({"role": "assistant", "content": ""}, "stop", native="completed"),
                usage_chunk(194, 12, cost=0.00042, cached=100, reasoning=4),
            ]
        )
    )

    run = CustomerSupportAgent.ask("How long do refunds take?")

    assert run.outcome == "completed", run.error
    assert run.response == "Refunds take 30 days."
    usage = run.usage
    assert (usage.input_tokens, usage.cache_read_tokens, usage.output_tokens, usage.reasoning_tokens) == (94, 100, 8, 4)
    metadata = response_of(run).metadata
    assert metadata["cost"] == 0.00042
    assert (metadata["upstream_provider"], metadata["native_finish_reason"], metadata["is_byok"]) == (
        "OpenAI",
        "completed",
        False,
    )
    assert metadata["id"] == "gen-1741570283-Uj9tQv3XwZrPn0sYkLmB"


# -- reasoning and tools -------------------------------------------------------------------------------


def test_reasoning_details_go_back_with_the_tool_call_they_led_to(connection):
    """Anthropic and Gemini models through OpenRouter need their reasoning back, signature and all,
    to continue after a tool call; the fragments streamed for one block become one detail."""
    arguments = json.dumps({"order_id": "A-17"})
    encrypted = {
        "type": "reasoning.encrypted",
        "data": "EqQBCkgIARABGAIiQBz",
        "id": "call_7",
        "format": "google-gemini-v1",
        "index": 1,
    }
    first = [
        reasoning_chunk("The customer asks about "),
        reasoning_chunk("order A-17; look it up.", signature="sig-Ek7u"),
        chunk({"role": "assistant", "content": "", "reasoning_details": [encrypted]}),
        *tool_call_chunks("call_7", "order_status", [arguments[:9], arguments[9:]]),
    ]
    connection.reply(stream(first), stream(text_chunks("It shipped yesterday.")))

    run = OrderAgent.stream_ask("Where is order A-17?")
    events = list(run)

    assert run.outcome == "completed", run.error
    assert [e.data["text"] for e in events if e.type == "reasoning_delta"] == [
        "The customer asks about ",
        "order A-17; look it up.",
    ]
    assistant = connection.received[1].body["messages"][2]
    assert assistant["tool_calls"][0]["function"] == {"name": "order_status", "arguments": arguments}
    assert assistant["reasoning_details"] == [
        {
            "type": "reasoning.text",
            "text": "The customer asks about order A-17; look it up.",
            "format": "anthropic-claude-v1",
            "index": 0,
            "signature": "sig-Ek7u",
        },
        encrypted,
    ]
    assert connection.received[1].body["messages"][3] == {
        "role": "tool",
        "tool_call_id": "call_7",
        "content": "order A-17 shipped yesterday",
    }


def test_reasoning_of_an_attempt_cut_off_mid_stream_is_not_sent_back(connection):
    """The retried attempt's reasoning replaces the dropped one's: only a whole response's details go back."""
    arguments = json.dumps({"order_id": "A-17"})
    connection.reply(
        drop_after([reasoning_chunk("Half a thou")]),
        stream(
            [
                reasoning_chunk("Look up A-17.", signature="sig-2"),
                *tool_call_chunks("call_8", "order_status", [arguments]),
            ]
        ),
        stream(text_chunks("It shipped yesterday.")),
    )

    run = OrderAgent.ask("Where is order A-17?")

    assert run.outcome == "completed", run.error
    assert "model_retry" in types(run)
    [detail] = connection.received[2].body["messages"][2]["reasoning_details"]
    assert (detail["text"], detail["signature"]) == ("Look up A-17.", "sig-2")


def test_reasoning_settings_are_sent_as_given(connection):
    connection.reply(stream(text_chunks("Done.")))

    run = CustomerSupportAgent.ask(
        "Hi", settings={"reasoning": {"effort": "high", "exclude": False}, "reasoning_effort": "high"}
    )

    assert run.outcome == "completed", run.error
    body = connection.received[0].body
    assert (body["reasoning"], body["reasoning_effort"]) == ({"effort": "high", "exclude": False}, "high")


# -- routing -------------------------------------------------------------------------------------------


def test_the_connections_routing_preferences_win_over_a_settings(config, server, monkeypatch):
    """A connection's data policy holds for every agent on it; a setting adds preferences but cannot undo it."""
    monkeypatch.setenv("OPENROUTER_API_KEY", KEY)
    policy = {"data_collection": "deny", "zdr": True, "order": ["anthropic", "openai"]}
    configure(providers={"openrouter": openrouter_options(server, provider=policy)})
    server.reply(stream(text_chunks("Done.")))

    settings = {
        "provider": {"order": ["deepinfra"], "sort": "throughput", "data_collection": "allow"},
        "models": ["openai/gpt-5-mini"],
    }
    run = CustomerSupportAgent.ask("Hi", settings=settings)

    assert run.outcome == "completed", run.error
    body = server.received[0].body
    assert body["provider"] == {
        "order": ["anthropic", "openai"],
        "sort": "throughput",
        "data_collection": "deny",
        "zdr": True,
    }
    assert body["models"] == ["openai/gpt-5-mini"]


def test_a_structured_result_routes_only_to_providers_that_take_the_schema(connection):
    connection.reply(stream(text_chunks('{"category": "delivery"}')))

    run = TriageAgent.ask("My package is missing.")

    assert run.outcome == "completed", run.error
    assert run.result.output == {"category": "delivery"}
    body = connection.received[0].body
    assert body["response_format"]["json_schema"]["schema"] == TRIAGE
    assert body["provider"] == {"require_parameters": True}


def test_a_structured_result_is_sent_as_a_strict_schema(connection):
    """Without ``strict``, OpenRouter (and the upstream behind it) takes the schema as a hint."""
    connection.reply(stream(text_chunks('{"category": "delivery"}')))

    TriageAgent.ask("My package is missing.")

    json_schema = connection.received[0].body["response_format"]["json_schema"]
    assert (json_schema["strict"], json_schema["schema"]) == (True, TRIAGE)


def test_settings_the_model_does_not_support_are_left_out_when_routing_requires_every_parameter(
    config, server, monkeypatch
):
    """With require_parameters, one unsupported setting would leave no provider to route to."""
    monkeypatch.setenv("OPENROUTER_API_KEY", KEY)
    supported = ["max_tokens", "reasoning", "response_format", "structured_outputs", "tools", "tool_choice"]
    configure(providers={"openrouter": openrouter_options(server, capabilities={"supported_parameters": supported})})
    server.reply(stream(text_chunks('{"category": "billing"}')))

    run = TriageAgent.ask(
        "I was charged twice.", settings={"temperature": 0.2, "max_tokens": 300, "provider": {"sort": "price"}}
    )

    assert run.outcome == "completed", run.error
    body = server.received[0].body
    assert "temperature" not in body
    assert body["max_tokens"] == 300
    assert body["provider"] == {"sort": "price", "require_parameters": True}


def test_a_model_without_structured_outputs_returns_the_result_through_a_tool(config, server, monkeypatch):
    """The flags come from OpenRouter's supported_parameters: no ``structured_outputs``, no response_format."""
    monkeypatch.setenv("OPENROUTER_API_KEY", KEY)
    configure(
        providers={
            "openrouter": openrouter_options(
                server, capabilities={"supported_parameters": ["tools", "tool_choice", "max_tokens"]}
            )
        }
    )
    first_request = {}

    def answer_with_the_result_tool(handler):
        [tool] = server.received[0].body["tools"]
        first_request.update(server.received[0].body)
        stream(tool_call_chunks("call_1", tool["function"]["name"], ['{"category": "delivery"}']))(handler)

    server.reply(answer_with_the_result_tool)

    run = TriageAgent.ask("My package is missing.")

    assert run.outcome == "completed", run.error
    assert run.result.output == {"category": "delivery"}
    assert "response_format" not in first_request and "provider" not in first_request


# -- errors and retries --------------------------------------------------------------------------------


def test_an_error_chunk_that_is_not_transient_fails_the_run_naming_the_upstream_provider(connection):
    raw = '{"type":"error","error":{"type":"invalid_request_error","message":"tool_use ids must be unique"}}'
    connection.reply(stream([chunk(), error_chunk("Provider returned error", 400, provider_name="Anthropic", raw=raw)]))

    run = CustomerSupportAgent.ask("Hi")

    assert run.outcome == "failed"
    assert type(run.error) is ProviderError and run.error.retryable is False
    assert "Provider returned error (upstream provider Anthropic: " in str(run.error)
    assert "tool_use ids must be unique" in str(run.error)
    assert len(connection.received) == 1


def test_a_context_window_error_told_only_by_the_upstream_provider_is_a_context_window_overflow(connection):
    """OpenRouter's 400 says only "Provider returned error"; the upstream's own error, in ``metadata.raw``, says why."""
    raw = (
        '{"type":"error","error":{"type":"invalid_request_error",'
        '"message":"prompt is too long: 201234 tokens > 200000 maximum"}}'
    )
    connection.reply(error(400, "Provider returned error", provider_name="Anthropic", raw=raw))

    run = OrderAgent.ask("Hi")

    assert run.outcome == "failed"
    assert type(run.error) is ContextWindowOverflowError and run.error.retryable is False
    assert "(upstream provider Anthropic: " in str(run.error)
    assert "prompt is too long: 201234 tokens > 200000 maximum" in str(run.error)
    assert len(connection.received) == 1


def test_out_of_credits_fails_at_once_and_says_retrying_will_not_help(connection):
    connection.reply(error(402, "Insufficient credits. Add more using https://openrouter.ai/credits"))

    run = CustomerSupportAgent.ask("Hi")

    assert run.outcome == "failed"
    assert type(run.error) is HTTPError
    assert (run.error.status, run.error.retryable) == (402, False)
    message = str(run.error)
    assert "answered 402 Payment Required: Insufficient credits" in message
    assert "run out of credits, so retrying will not help" in message
    assert len(connection.received) == 1
    assert "model_retry" not in types(run)


@pytest.mark.parametrize(
    ("status", "message", "metadata"),
    [
        (429, "Rate limit exceeded: free-models-per-min.", {}),
        (
            502,
            "Provider returned error",
            {"provider_name": "Anthropic", "raw": '{"type":"overloaded_error","message":"Overloaded"}'},
        ),
        (503, "No available model provider that meets your routing requirements", {}),
    ],
)
def test_transient_statuses_are_retried_after_the_wait_retry_after_asks_for(connection, status, message, metadata):
    ErrorWatchingAgent.seen = []
    connection.reply(error(status, message, headers={"Retry-After": "0.5"}, **metadata), stream(text_chunks("Done.")))

    run = ErrorWatchingAgent.ask("Hi")

    assert run.outcome == "completed", run.error
    [seen] = ErrorWatchingAgent.seen
    assert (seen.status, seen.retryable, seen.retry_after) == (status, True, 0.5)
    [retry] = retries(run)
    assert f"answered {status} " in retry_reasons(run)[0] and message in retry_reasons(run)[0]
    if metadata:
        assert "(upstream provider Anthropic: " in retry_reasons(run)[0] and "Overloaded" in retry_reasons(run)[0]


def test_flagged_input_fails_with_the_moderation_reasons(connection):
    connection.reply(
        error(
            403,
            'openai/gpt-5.6-luna requires moderation on OpenAI. Your input was flagged for "harassment".',
            reasons=["harassment"],
            flagged_input="...",
            provider_name="OpenAI",
            model_slug="openai/gpt-5.6-luna",
        )
    )

    run = CustomerSupportAgent.ask("Hi")

    assert (run.error.status, run.error.retryable) == (403, False)
    assert "flagged for: harassment" in str(run.error)
    assert "choose another model" in str(run.error)


# -- credentials and connection options -------------------------------------------------------------------


def test_a_key_given_in_the_configuration_is_used_instead_of_the_variable(config, server, monkeypatch):
    monkeypatch.setenv("OPENROUTER_API_KEY", "sk-or-v1-from-env")
    configure(providers={"openrouter": openrouter_options(server, api_key=KEY)})
    server.reply(stream(text_chunks("ok")))

    assert CustomerSupportAgent.ask("Hi").response == "ok"
    assert server.received[0].headers["authorization"] == f"Bearer {KEY}"


@pytest.mark.parametrize(
    ("options", "problem"),
    [
        ({"site_url": "support.example.com"}, "site_url must be your app's http"),
        ({"app_name": "Café Support"}, "app_name must be a non-empty line of ASCII text"),
        ({"app_name": "Support\nX-Injected: 1"}, "app_name must be a non-empty line of ASCII text"),
        ({"provider": "deny"}, "provider must be a mapping of OpenRouter routing preferences"),
        ({"provider": {"data_colection": "deny"}}, "unknown routing preference 'data_colection'"),
        ({"provider": {"require_parameters": "yes"}}, "require_parameters must be true or false"),
        ({"capabilities": {"supported_parameters": "tools"}}, "supported_parameters must be a list of parameter names"),
        ({"capabilities": {"supported_parameters": ["tools"], "streaming": True}}, "capabilities: .*streaming"),
    ],
)
def test_bad_connection_options_are_configuration_errors_naming_the_option(
    config, server, monkeypatch, options, problem
):
    monkeypatch.setenv("OPENROUTER_API_KEY", KEY)
    configure(providers={"openrouter": {**openrouter_options(server), **options}})

    with pytest.raises(ConfigurationError, match=problem):
        CustomerSupportAgent.ask("Hi")
    assert server.received == []
