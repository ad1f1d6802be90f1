"""The YAML config file: lg.yaml or $LG_CONFIG; configure() > environment > YAML > defaults."""

from __future__ import annotations

import warnings

import pytest

from lg_core import Configuration
from lg_core.config import build_configuration, configure, with_configuration
from lg_core.errors import ConfigurationError


@pytest.fixture(autouse=True)
def clean_env(monkeypatch, tmp_path):
    for name in ("LG_RUN_STORE", "LG_BROKER_URL", "LG_IMPORTS", "LG_LEASE_SECONDS", "LG_CONFIG", "LG_RATE_LIMITS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)


def test_lg_yaml_in_the_working_directory_is_read(tmp_path):
    (tmp_path / "lg.yaml").write_text(
        "run_store: sqlite:///from-yaml.db\nbroker_url: redis://yaml:6379/0\nimports: [app.agents, app.tools]\n"
        "lease_seconds: 7\nproviders:\n  openai: {api_key_env: OPENAI_API_KEY}\n"
    )
    config = build_configuration()
    assert config.run_store == "sqlite:///from-yaml.db"
    assert config.broker_url == "redis://yaml:6379/0"
    assert config.imports == ["app.agents", "app.tools"]
    assert config.lease_seconds == 7
    assert config.providers == {"openai": {"api_key_env": "OPENAI_API_KEY"}}


def test_precedence_configure_then_environment_then_yaml_then_defaults(tmp_path, monkeypatch):
    (tmp_path / "lg.yaml").write_text("run_store: sqlite:///yaml.db\nbroker_url: redis://yaml/0\nlease_seconds: 7\n")
    monkeypatch.setenv("LG_BROKER_URL", "redis://env/0")
    monkeypatch.setenv("LG_LEASE_SECONDS", "9")
    config = build_configuration(lease_seconds=11)
    assert config.run_store == "sqlite:///yaml.db"  # YAML over the default
    assert config.broker_url == "redis://env/0"  # environment over YAML
    assert config.lease_seconds == 11  # keyword values over the environment
    assert config.max_parallel_tools == 8  # default
    with with_configuration(build_configuration()):
        assert configure(lease_seconds=12).lease_seconds == 12  # configure() over everything


def test_lg_config_names_the_file(tmp_path, monkeypatch):
    (tmp_path / "lg.yaml").write_text("service_name: ignored\n")
    named = tmp_path / "elsewhere.yaml"
    named.write_text("service_name: from-lg-config\n")
    monkeypatch.setenv("LG_CONFIG", str(named))
    assert Configuration().service_name == "from-lg-config"


def test_no_file_means_defaults():
    assert build_configuration().run_store == "sqlite://"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("lease_seconds: -1\n", "lease_seconds (in config file"),
        ("max_parallel_tools: many\n", "max_parallel_tools (in config file"),
        ("lease_secs: 3\n", "unknown setting 'lease_secs' in config file"),
        ("default_models: support\n", "lg.yaml (did you mean 'default_model'?)"),
        ("run_store: [unclosed\n", "is not valid YAML at line"),
        ("- run_store\n", "must be a mapping of settings"),
    ],
)
def test_a_bad_file_is_a_configuration_error_naming_the_key(tmp_path, text, message):
    (tmp_path / "lg.yaml").write_text(text)
    with pytest.raises(ConfigurationError) as caught:
        build_configuration()
    assert message in str(caught.value)
    assert str(tmp_path / "lg.yaml") in str(caught.value)


def test_a_bad_environment_value_names_the_variable(monkeypatch):
    monkeypatch.setenv("LG_LEASE_SECONDS", "0")
    with pytest.raises(ConfigurationError, match=r"lease_seconds \(from \$LG_LEASE_SECONDS\)"):
        build_configuration()


@pytest.mark.parametrize("value", ["nan", "-nan", "inf"])
@pytest.mark.parametrize("name", ["LG_LEASE_SECONDS", "LG_RELAY_GRACE", "LG_RELAY_BACKOFF_MAX"])
def test_seconds_that_are_not_a_finite_number_say_so(monkeypatch, name, value):
    """nan was refused as "less than or equal to 3600", which nan is not, but which does not say what is wrong."""
    monkeypatch.setenv(name, value)
    with pytest.raises(ConfigurationError, match="finite number"):
        build_configuration()


def test_lg_config_naming_a_missing_file_is_an_error(tmp_path, monkeypatch):
    monkeypatch.setenv("LG_CONFIG", str(tmp_path / "missing.yaml"))
    with pytest.raises(ConfigurationError, match="LG_CONFIG=.*missing.yaml names no readable file"):
        build_configuration()


def test_model_call_rate_limits_come_from_the_file_or_the_environment(tmp_path, monkeypatch):
    (tmp_path / "lg.yaml").write_text("rate_limits:\n  openai: 600/min\n  anthropic: 50 / second\n")
    assert build_configuration().rate_limits == {"openai": "600/min", "anthropic": "50/s"}
    monkeypatch.setenv("LG_RATE_LIMITS", '{"openai": "10/s"}')
    assert build_configuration().rate_limits == {"openai": "10/s", "anthropic": "50/s"}  # merged key by key


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("rate_limits:\n  openai: fast\n", "rate limit 'fast' is not understood"),
        ("rate_limits:\n  'openai:gpt-4o': 10/s\n", "provider connection names"),
    ],
)
def test_a_bad_rate_limit_in_the_file_names_the_key(tmp_path, text, message):
    (tmp_path / "lg.yaml").write_text(text)
    with pytest.raises(ConfigurationError, match="rate_limits") as caught:
        build_configuration()
    assert message in str(caught.value)


@pytest.mark.parametrize(
    ("name", "example"),
    [
        ("LG_PROVIDERS", """LG_PROVIDERS='{"primary": {"adapter": "openrouter"""),
        ("LG_MODELS", """LG_MODELS='{"customer_support": {"target": "primary:openai/gpt-5.6-luna"""),
    ],
)
def test_connections_and_roles_from_the_environment_show_their_json_shape(monkeypatch, name, example):
    """A role or connection written as in a shell (``customer_support=primary:...``) gets an example to copy."""
    monkeypatch.setenv(name, "customer_support=primary:openai/gpt-5.6-luna")
    with pytest.raises(ConfigurationError, match="not valid JSON") as caught:
        build_configuration()
    assert example in str(caught.value)


@pytest.mark.parametrize("name", ["LG_RATE_LIMITS", "LG_PROVIDERS", "LG_MODELS", "LG_HOOKS"])
def test_a_json_setting_that_is_not_json_names_the_variable(monkeypatch, name):
    monkeypatch.setenv(name, "openai=600/min")
    with pytest.raises(ConfigurationError, match=f"from \\${name}\\): not valid JSON"):
        build_configuration()


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: Configuration(run_store=5), "run_store: Input should be a valid string"),
        (lambda: Configuration(lease_seconds="soon"), "lease_seconds"),
        (lambda: setattr(Configuration(), "session_store", 42), "session_store must be a provider name"),
        (lambda: setattr(Configuration(), "max_parallel_tools", "many"), "max_parallel_tools"),
        (lambda: Configuration(store_pool_size=0), "store_pool_size: Input should be greater than or equal to 1"),
    ],
)
def test_a_bad_value_given_to_configuration_directly_is_a_configuration_error(make, message):
    # Configuration(...) and attribute assignment are public too, not only configure().
    with pytest.raises(ConfigurationError, match=message):
        make()


def test_a_rejected_assignment_keeps_the_previous_value():
    config = Configuration(lease_seconds=9)
    with pytest.raises(ConfigurationError):
        config.lease_seconds = "soon"
    assert config.lease_seconds == 9


@pytest.mark.parametrize(
    "url", ["amqp://guest@rabbit//", "http://127.0.0.1:6379", "localhost:6379", "sentinel://h:26379"]
)
def test_a_broker_url_that_is_not_redis_is_refused_naming_its_source(monkeypatch, url):
    """Workers, event streams and rate limits all speak Redis: any other URL failed later, in a
    traceback from start_execution or a Celery worker that `lg worker` restarted forever."""
    monkeypatch.setenv("LG_BROKER_URL", url)
    with pytest.raises(ConfigurationError, match=r"broker_url \(from \$LG_BROKER_URL\).* is not a Redis URL"):
        build_configuration()
    monkeypatch.delenv("LG_BROKER_URL")
    with with_configuration(build_configuration()), pytest.raises(ConfigurationError, match="is not a Redis URL"):
        configure(broker_url=url)


@pytest.mark.parametrize("url", ["redis://127.0.0.1:6379/0", "rediss://:secret@redis.internal:6380/1", "REDIS://h/0"])
def test_redis_broker_urls_are_taken(url):
    assert build_configuration(broker_url=url).broker_url == url


def test_an_empty_broker_url_means_no_broker(monkeypatch):
    monkeypatch.setenv("LG_BROKER_URL", "")
    assert not build_configuration().broker_url


def test_a_misspelled_variable_is_reported_once_with_the_setting_it_resembles(monkeypatch):
    from lg_core import config as config_module
    from lg_core.config import ConfigurationWarning

    monkeypatch.setattr(config_module, "_warned_variables", set())
    monkeypatch.setenv("LG_RUNSTORE", "sqlite:///meant.db")
    with pytest.warns(ConfigurationWarning, match=r"\$LG_RUNSTORE is not a LittleGhost setting .* \$LG_RUN_STORE"):
        config = build_configuration()
    assert config.run_store == "sqlite://"  # ignored, as the warning says
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        build_configuration()  # said once per process, not on every configuration


def test_other_lg_variables_are_not_reported(monkeypatch):
    from lg_core import config as config_module

    monkeypatch.setattr(config_module, "_warned_variables", set())
    monkeypatch.setenv("LG_WEB_AGENTS", "examples.web_agents")  # another program's variable, not a near miss
    monkeypatch.setenv("LG_RUN_STORE", "sqlite://")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        build_configuration()


def test_the_repr_of_a_configuration_shows_no_secret():
    """A configuration lands in tracebacks, test failures and logs: every value the provider
    adapters treat as a secret (any header value, a base_url's password and query values) is masked."""
    config = Configuration(
        run_store="postgresql+psycopg://app:store-pw@db/lg",
        broker_url="redis://:broker-pw@redis:6379/0",
        providers={
            "openai": {
                "adapter": "openai",
                "api_key": "sk-live-123",
                "api_key_env": "OPENAI_API_KEY",
                "headers": {"Authorization": "Bearer sk-live-456", "X-Gateway-Key": "gw-key-789"},
            },
            "gateway": {
                "adapter": "openai",
                "base_url": "https://gw-user:userinfo-pw@gw.example/v1?key=query-pw&region=eu",
            },
        },
    )
    text = repr(config)
    for secret in ("store-pw", "broker-pw", "sk-live-123", "sk-live-456", "gw-key-789", "userinfo-pw", "query-pw"):
        assert secret not in text
    assert "OPENAI_API_KEY" in text and "app:***@db" in text
    assert "'X-Gateway-Key': '***'" in text and "https://gw-user:***@gw.example/v1?key=***&region=***" in text
    assert config.providers["openai"]["api_key"] == "sk-live-123"  # only the repr is masked


def test_the_running_configuration_refuses_changes_made_in_place_as_it_refuses_assignments():
    """Spec (LittleGhost.configure): "Once the shared Runtime is ready, later mutations raise
    ConfigurationError". Changing a mapping in place was silently lost: the runtime had read it."""
    import copy

    configuration = Configuration(
        providers={"primary": {"adapter": "scripted"}},
        models={"customer_support": {"target": "primary:x", "settings": {"temperature": 0.2}}},
        imports=["myapp.agents"],
    )
    configuration.runtime()
    try:
        changes = [
            lambda: setattr(configuration, "default_model", "customer_support"),
            lambda: configuration.models.update(premium={"target": "primary:y"}),
            lambda: configuration.models.__setitem__("premium", {"target": "primary:y"}),
            lambda: configuration.models["customer_support"]["settings"].__setitem__("temperature", 0.9),
            lambda: configuration.providers["primary"].pop("adapter"),
            lambda: configuration.imports.append("myapp.more"),
        ]
        for change in changes:
            with pytest.raises(ConfigurationError, match="the configuration is locked because its runtime is running"):
                change()
        assert configuration.models == {"customer_support": {"target": "primary:x", "settings": {"temperature": 0.2}}}
        mine = copy.deepcopy(configuration.models)  # a copy is the caller's to change
        mine["premium"] = {"target": "primary:y"}
    finally:
        configuration.close()
    configuration.models["premium"] = {"target": "primary:y"}  # editable again once the runtime is closed
    configuration.imports.append("myapp.more")
    assert type(configuration.models) is dict and "premium" in configuration.models


def test_a_failed_runtime_build_leaves_the_configuration_editable():
    """Spec (Configuration#runtime): "A failed build leaves the configuration editable for a later attempt"."""
    configuration = Configuration(models={"support": {"target": "scripted:x", "settings": "hot"}})
    with pytest.raises(ConfigurationError, match="settings must be a mapping"):
        configuration.runtime()
    configuration.models["support"]["settings"] = {"temperature": 0.2}
    try:
        assert configuration.runtime().model_resolver.resolve("support").settings == {"temperature": 0.2}
    finally:
        configuration.close()


def test_configuration_configure_sets_several_settings_and_returns_itself():
    """The spec's ``Configuration#configure`` on a configuration of one's own, as for Runtime(configuration)."""
    configuration = Configuration()
    assert (
        configuration.configure(models={"support": {"target": "scripted:x"}}, default_model="support") is configuration
    )
    assert (configuration.default_model, list(configuration.models)) == ("support", ["support"])
    with pytest.raises(ConfigurationError, match=r"unknown setting 'defualt_model' \(did you mean 'default_model'\?\)"):
        configuration.configure(service_name="support-api", defualt_model="other")
    assert configuration.service_name == "littleghost"  # nothing set when a name is unknown


def test_the_relay_backoff_cap_reaches_the_run_store(monkeypatch):
    monkeypatch.setenv("LG_RELAY_BACKOFF_MAX", "120")
    configuration = build_configuration()
    try:
        assert configuration.runtime().store.relay_backoff_max == 120.0
    finally:
        configuration.close()


@pytest.fixture
def broken_modules(tmp_path, monkeypatch):
    """Importable modules whose own code fails: one raises at import, one is not valid Python."""
    (tmp_path / "cfg_raises_at_import.py").write_text("raise RuntimeError('boom at import')\n")
    (tmp_path / "cfg_bad_syntax.py").write_text("def f(:\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


@pytest.mark.parametrize(
    ("setting", "value", "message"),
    [
        ("session_actor", "cfg_raises_at_import:f", "session_actor: importing session_actor 'cfg_raises_at_import:f'"),
        ("provider_credentials", "cfg_raises_at_import:f", "importing provider_credentials 'cfg_raises_at_import:f'"),
        (
            "model_resolver",
            "cfg_raises_at_import:resolver",
            "model_resolver: importing 'cfg_raises_at_import:resolver'",
        ),
        ("provider_adapters", {"gw": "cfg_raises_at_import:Gateway"}, "adapter 'gw': importing 'cfg_raises_at_import"),
    ],
)
def test_a_setting_naming_a_module_that_raises_is_a_configuration_error(broken_modules, setting, value, message):
    """A RuntimeError inside the named module escaped as itself: `lg runs list` printed a traceback."""
    for make in (lambda: Configuration(**{setting: value}), lambda: Configuration().configure(**{setting: value})):
        with pytest.raises(ConfigurationError) as caught:
            make()
        assert message in str(caught.value)
        assert "failed: RuntimeError: boom at import (at " in str(caught.value)
        assert "cfg_raises_at_import.py:1)" in str(caught.value)
        assert isinstance(caught.value.__cause__, RuntimeError)  # still there for a debugger


def test_a_setting_naming_a_module_with_a_syntax_error_names_the_file_and_line(broken_modules):
    with pytest.raises(ConfigurationError) as caught:
        Configuration(model_resolver="cfg_bad_syntax:resolver")
    assert "importing 'cfg_bad_syntax:resolver' failed: SyntaxError: " in str(caught.value)
    assert f"(at {broken_modules / 'cfg_bad_syntax.py'}:1)" in str(caught.value)
    assert isinstance(caught.value.__cause__, SyntaxError)


def test_a_module_that_raises_names_its_variable_or_file(broken_modules, monkeypatch):
    monkeypatch.setenv("LG_SESSION_ACTOR", "cfg_raises_at_import:f")
    with pytest.raises(ConfigurationError, match=r"session_actor \(from \$LG_SESSION_ACTOR\): importing"):
        build_configuration()
    monkeypatch.delenv("LG_SESSION_ACTOR")
    (broken_modules / "lg.yaml").write_text("model_resolver: cfg_raises_at_import:resolver\n")
    with pytest.raises(ConfigurationError, match=r"model_resolver \(in config file .*lg.yaml\): importing"):
        build_configuration()


def test_the_cli_reports_a_setting_naming_a_module_that_raises_in_one_line(broken_modules):
    from typer.testing import CliRunner

    from lg_core.cli import app

    store = f"sqlite:///{broken_modules / 'runs.db'}"
    CliRunner().invoke(app, ["runs", "list", "--store", store])  # creates the store
    result = CliRunner().invoke(
        app, ["runs", "list", "--store", store], env={"LG_SESSION_ACTOR": "cfg_raises_at_import:f"}
    )
    assert result.exit_code == 2, result.output
    assert "RuntimeError: boom at import" in result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize(
    "name",
    [
        "lease_seconds",
        "relay_grace",
        "relay_backoff_max",
        "max_step_attempts",
        "max_parallel_tools",
        "run_cache_size",
        "store_pool_size",
        "store_outage_patience",
    ],
)
@pytest.mark.parametrize("text", ["yes", "on", "true", "off"])
def test_a_yaml_boolean_is_not_taken_as_a_number(tmp_path, name, text):
    """YAML reads yes/on/true as True, which pydantic took as 1: a one-second lease from a typo."""
    (tmp_path / "lg.yaml").write_text(f"{name}: {text}\n")
    with pytest.raises(
        ConfigurationError,
        match=rf"{name} \(in config file .*lg.yaml\): Input should be a valid (integer|number), not the boolean",
    ):
        build_configuration()


@pytest.mark.parametrize(
    "name",
    [
        "lease_seconds",
        "relay_grace",
        "relay_backoff_max",
        "max_step_attempts",
        "max_parallel_tools",
        "run_cache_size",
        "store_pool_size",
        "store_outage_patience",
    ],
)
def test_a_boolean_given_for_a_number_is_refused(name):
    with pytest.raises(
        ConfigurationError, match=rf"{name}: Input should be a valid (integer|number), not the boolean True"
    ):
        Configuration(**{name: True})
    config = Configuration()
    with pytest.raises(
        ConfigurationError, match=rf"{name}: Input should be a valid (integer|number), not the boolean False"
    ):
        config.configure(**{name: False})
    assert getattr(config, name) == Configuration.model_fields[name].default


def test_numbers_are_still_taken_from_every_source(tmp_path, monkeypatch):
    (tmp_path / "lg.yaml").write_text("max_step_attempts: 3\nrelay_grace: 2\n")
    monkeypatch.setenv("LG_RUN_CACHE_SIZE", "7")
    config = build_configuration(lease_seconds=5)
    assert (config.max_step_attempts, config.relay_grace, config.run_cache_size, config.lease_seconds) == (
        3,
        2.0,
        7,
        5.0,
    )
