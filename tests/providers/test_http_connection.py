"""Connection options every HTTP adapter shares (lg_core.providers._http.connection), checked per adapter.

httpx sends header values as ASCII: anything else used to surface as a bare
UnicodeEncodeError when the first request was built, in the middle of a run.
"""

from __future__ import annotations

import pytest

from lg_core import Agent, ConfigurationError, CredentialError, configure
from tests.providers.openai_server import serve

HTTP_ADAPTERS = ["openai", "anthropic", "openrouter"]


@pytest.fixture
def server():
    yield from serve()


class SupportAgent(Agent):
    model = "remote:some-model"


def connect(server, adapter, **options):
    configure(providers={"remote": {"adapter": adapter, "base_url": server.base_url, "allow_insecure_http": True, **options}})


@pytest.mark.parametrize("adapter", HTTP_ADAPTERS)
@pytest.mark.parametrize("headers", [{"X-Title": "Café Support"}, {"X-Titlé": "Support"}])
def test_a_header_that_is_not_ascii_is_a_configuration_error(config, server, adapter, headers):
    connect(server, adapter, api_key="sk-test", headers=headers)

    with pytest.raises(ConfigurationError, match=r"header 'X-Titl.' must be ASCII text"):
        SupportAgent.ask("Hi")
    assert server.received == []


@pytest.mark.parametrize("adapter", HTTP_ADAPTERS)
def test_a_key_that_is_not_ascii_fails_the_run_without_showing_it(config, server, adapter, monkeypatch):
    """A key pasted with a typographic quote; its characters stay out of the message."""
    monkeypatch.setenv("LG_TEST_PASTED_KEY", "sk-test-Zq7t0p\u2019")
    connect(server, adapter, api_key_env="LG_TEST_PASTED_KEY")

    run = SupportAgent.ask("Hi")

    assert run.outcome == "failed"
    assert isinstance(run.error, CredentialError)
    assert "the API key in $LG_TEST_PASTED_KEY has characters that are not ASCII" in str(run.error)
    assert "Zq7t0p" not in str(run.error)
    assert server.received == []


@pytest.mark.parametrize("adapter", HTTP_ADAPTERS)
def test_a_configured_key_that_is_not_ascii_names_the_option(config, server, adapter):
    connect(server, adapter, api_key="sk-tést")

    run = SupportAgent.ask("Hi")

    assert isinstance(run.error, CredentialError)
    assert "the API key in api_key has characters that are not ASCII" in str(run.error)
    assert server.received == []
