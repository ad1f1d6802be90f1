"""Shared fixtures: every test gets an isolated configuration and runtime."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from lg_core import Configuration, with_configuration
from lg_core.providers import scripted

# Real providers' credentials: with one of them in a developer's environment, an agent
# without a model (or a connection without a key) would reach a provider's real server.
PROVIDER_KEY_VARIABLES = (
    "OPENROUTER_API_KEY",
    "OPENAI_API_KEY",
    "ANTHROPIC_API_KEY",
    "GEMINI_API_KEY",
    "GOOGLE_API_KEY",
)


@pytest.fixture(autouse=True)
def _no_real_provider_credentials(monkeypatch):
    """Tests never reach a provider's real server; a test that needs a key sets its own."""
    for name in PROVIDER_KEY_VARIABLES:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(autouse=True)
def _no_terminal_size_from_the_test_runner(monkeypatch):
    """The ``lg`` commands a test runs see the same environment under pytest-xdist as without it.

    xdist's workers set COLUMNS=80 and LINES=24, which rich honours over its
    200-column width for piped output: a CLI's output would wrap only there.
    """
    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.delenv("LINES", raising=False)


@pytest.fixture(autouse=True)
def _no_process_default_left_on_a_test_server():
    """A test's servers go away with it; the process-wide default configuration must not point at them.

    The default is built from the environment the first time code runs outside any
    ``with_configuration`` block: a thread a test starts does not inherit the block
    (context variables stay with their thread), so while the test's LG_RUN_STORE
    names its own PostgreSQL, that thread builds a default on it, and every later
    test using the default found a stopped server. Such a default is dropped here.
    """
    from lg_core import config as config_module

    before = config_module._default
    yield
    after = config_module._default
    if after is not None and after is not before and (after.run_store != "sqlite://" or after.broker_url):
        config_module._default = before
        after.close()


@pytest.fixture(scope="session")
def postgres():
    """One real PostgreSQL server for the whole session."""
    from lg_scheduler.stack.servers import PostgresServer

    server = PostgresServer().start()
    yield server
    server.stop()


@pytest.fixture
def pg_url(postgres) -> str:
    """A fresh, empty PostgreSQL database for one test."""
    return postgres.create_database(f"lg_{uuid.uuid4().hex[:12]}")


@pytest.fixture(params=["file", "postgres"])
def durable_url(request, tmp_path) -> str:
    """A fresh run store URL on each durable backend in turn: a SQLite file, then PostgreSQL."""
    if request.param == "file":
        return f"sqlite:///{tmp_path / 'runs.db'}"
    return request.getfixturevalue("pg_url")


@pytest.fixture
def config() -> Iterator[Configuration]:
    """A fresh in-memory configuration, current for the test, closed afterwards."""
    configuration = Configuration()
    with with_configuration(configuration):
        yield configuration
    configuration.close()


@pytest.fixture
def file_config(tmp_path) -> Iterator[Configuration]:
    """A fresh configuration with a SQLite file store under the test's tmp dir."""
    configuration = Configuration(run_store=f"sqlite:///{tmp_path / 'runs.db'}")
    with with_configuration(configuration):
        yield configuration
    configuration.close()


@pytest.fixture
def script() -> Iterator:
    """Register scripted models under unique names; returns ``register(turns, **kw) -> target``."""
    names: list[str] = []

    def register(turns, **options) -> str:
        name = f"test-{uuid.uuid4().hex[:10]}"
        scripted.register(name, turns, **options)
        names.append(name)
        return f"scripted:{name}"

    yield register
    for name in names:
        scripted.unregister(name)


def pytest_collection_modifyitems(items):
    """A chaos test is also a slow one, so ``-m "not slow"`` (the fast tier) leaves every crash test out."""
    for item in items:
        if item.get_closest_marker("chaos") is not None:
            item.add_marker(pytest.mark.slow)
