"""Application provider adapters: registered by name in the configuration, checked when configured."""

from __future__ import annotations

import json

import pytest

from lg_core import Agent, Configuration, ConfigurationError, configure
from lg_core.events import StreamEvent
from lg_core.messages import Message
from lg_core.models.request import ModelCapabilities, ModelResponse
from lg_core.providers import (
    AnthropicProvider,
    GeminiProvider,
    OpenAIProvider,
    OpenRouterProvider,
    Provider,
)


class EchoProvider(Provider):
    """Answers with the last user message, prefixed by its connection's ``prefix`` option."""

    adapter = "echo"

    def capabilities(self, model_id):
        return ModelCapabilities.permissive()

    def stream(self, request, model_id):
        text = f"{self.options.get('prefix', '')}{request.messages[-1].text}"
        yield StreamEvent.build("message_start", model=f"{self.connection}:{model_id}")
        yield StreamEvent.build("text_delta", text=text)
        response = ModelResponse(message=Message(role="assistant", content=text))
        yield StreamEvent.build("message_stop", stop_reason="end_turn", response=response)


ECHO_PATH = f"{__name__}:EchoProvider"


class EchoAgent(Agent):
    model = "mine:any-model"


def test_an_adapter_named_by_import_path_serves_its_connections(config):
    configure(provider_adapters={"echo": ECHO_PATH}, providers={"mine": {"adapter": "echo", "prefix": "echo: "}})

    run = EchoAgent.ask("hello")

    assert run.outcome == "completed", run.error
    assert run.response == "echo: hello"
    assert config.provider_adapters == {"echo": EchoProvider}


def test_provider_adapter_registers_a_class_as_the_spec_method_does(config):
    config.provider_adapter("echo", EchoProvider)
    configure(providers={"mine": {"adapter": "echo"}})

    assert EchoAgent.ask("hi").response == "hi"


def test_the_openai_adapter_is_built_in(config):
    configure(providers={"primary": {"adapter": "openai", "api_key": "sk-test"}})

    model = config.runtime().resolver.resolve("primary:gpt-4o-mini")

    assert isinstance(model.provider, OpenAIProvider)
    assert model.capabilities == ModelCapabilities.permissive()


def test_the_anthropic_adapter_is_built_in_and_says_what_claude_supports(config):
    configure(providers={"claude": {"adapter": "anthropic", "api_key": "sk-ant-test"}})

    model = config.runtime().resolver.resolve("claude:claude-sonnet-4-5")

    assert isinstance(model.provider, AnthropicProvider)
    assert model.capabilities == ModelCapabilities(tools=True, tool_choice=True, native_structured_output=False)


def test_the_gemini_adapter_is_built_in_and_says_what_gemini_supports(config):
    configure(providers={"google": {"adapter": "gemini", "api_key": "AIza-test"}})

    model = config.runtime().resolver.resolve("google:gemini-2.5-flash")

    assert isinstance(model.provider, GeminiProvider)
    assert model.capabilities == ModelCapabilities(tools=True, tool_choice=True, native_structured_output=False)


def test_an_unknown_adapter_name_lists_the_built_in_ones(config):
    configure(providers={"claude": {"adapter": "antropic", "api_key": "sk-ant-test"}})

    with pytest.raises(
        ConfigurationError,
        match=(
            "unknown adapter 'antropic'; available adapters: anthropic, gemini, openai, openrouter, scripted, vertex_ai"
        ),
    ):
        config.runtime().resolver.resolve("claude:claude-sonnet-4-5")


def test_an_unimportable_adapter_path_fails_at_configuration_naming_it(config):
    with pytest.raises(
        ConfigurationError, match=r"provider_adapters.*adapter 'gateway'.*'no_such_module:Gateway' cannot be imported"
    ):
        configure(provider_adapters={"gateway": "no_such_module:Gateway"})


def test_an_adapter_that_is_not_a_provider_subclass_fails_at_configuration(config):
    with pytest.raises(ConfigurationError, match=r"adapter 'gateway' must be a lg_core.providers.Provider subclass"):
        configure(provider_adapters={"gateway": f"{__name__}:EchoAgent"})
    with pytest.raises(ConfigurationError, match=r"adapter 'gateway' must be"):
        config.provider_adapter("gateway", lambda connection, options: EchoProvider(connection, options))


def test_adapters_come_from_the_environment_as_json(monkeypatch):
    monkeypatch.setenv("LG_PROVIDER_ADAPTERS", json.dumps({"echo": ECHO_PATH}))

    assert Configuration().provider_adapters == {"echo": EchoProvider}

    monkeypatch.setenv("LG_PROVIDER_ADAPTERS", "echo=" + ECHO_PATH)
    with pytest.raises(ConfigurationError, match=r"LG_PROVIDER_ADAPTERS.*not valid JSON.*GatewayProvider"):
        Configuration()


def test_adapters_come_from_the_config_file(tmp_path, monkeypatch):
    path = tmp_path / "lg.yaml"
    path.write_text(f"provider_adapters:\n  echo: {ECHO_PATH}\nproviders:\n  mine: {{adapter: echo}}\n")
    monkeypatch.setenv("LG_CONFIG", str(path))

    assert Configuration().provider_adapters == {"echo": EchoProvider}

    path.write_text("provider_adapters:\n  echo: tests.providers:Missing\n")
    with pytest.raises(ConfigurationError) as raised:
        Configuration()
    assert f"provider_adapters (in config file {path}): adapter 'echo'" in str(raised.value)
    assert "'tests.providers:Missing' cannot be imported" in str(raised.value)


def test_the_openrouter_adapter_and_connection_are_built_in(config, monkeypatch):
    """The spec's first example names ``openrouter:...`` with only $OPENROUTER_API_KEY set, no configuration."""
    monkeypatch.setenv("OPENROUTER_API_KEY", "sk-or-v1-test")

    model = config.runtime().resolver.resolve("openrouter:openai/gpt-5.6-luna")

    assert isinstance(model.provider, OpenRouterProvider)
    assert (model.model_id, model.provider.settings.base_url) == ("openai/gpt-5.6-luna", "https://openrouter.ai/api/v1")
    assert model.provider.settings.request_headers()["Authorization"] == "Bearer sk-or-v1-test"


def test_a_configured_openrouter_connection_replaces_the_built_in_one(config):
    configure(
        providers={"openrouter": {"adapter": "openai", "base_url": "https://gateway.example.test/v1", "api_key": "k"}}
    )

    provider = config.runtime().resolver.resolve("openrouter:openai/gpt-5.6-luna").provider

    assert type(provider) is OpenAIProvider
    assert provider.settings.base_url == "https://gateway.example.test/v1"
