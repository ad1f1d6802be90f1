"""ModelResolver as the spec's API page shows it: roles, targets and inline mappings."""

from __future__ import annotations

import warnings
from decimal import Decimal

import pytest

import lg_core
from lg_core import (
    AdapterLoadError,
    Agent,
    Configuration,
    ConfigurationError,
    ModelResolver,
    configure,
)
from lg_core.config import ConfigurationWarning
from lg_core.providers import ScriptedProvider


def test_profiles_keyword_defines_roles_as_in_the_spec(script):
    """The spec's ``ModelResolver.new(profiles: {customer_support: {target: ...}})``."""
    target = script([{"text": "unused"}])
    resolver = ModelResolver(
        profiles={"customer_support": {"target": target, "settings": {"temperature": 0.2}}},
        default_model="customer_support",
    )
    model = resolver.resolve("customer_support")
    assert (model.target, model.role, model.settings) == (target, "customer_support", {"temperature": 0.2})
    assert resolver.resolve(None).role == "customer_support"


def test_a_role_name_with_a_colon_is_refused(script):
    with pytest.raises(ConfigurationError, match="contains ':'"):
        ModelResolver(profiles={"support:fast": {"target": script([{"text": "unused"}])}})


@pytest.mark.parametrize(
    ("profile", "match"),
    [
        # Flat settings beside the target were ignored: the role ran at the provider's default temperature.
        (
            {"target": "scripted:x", "temperature": 0.2},
            r"model role 'support' has unknown key 'temperature'.*under 'settings'",
        ),
        # Settings that are not a mapping failed the first ask with a raw ValueError from dict().
        (
            {"target": "scripted:x", "settings": "hot"},
            r"model role 'support': settings must be a mapping.*got str 'hot'",
        ),
        ({"target": "scripted:x", "settings": [("temperature", 0.2)]}, r"settings must be a mapping"),
        # Not JSON: the request body's encoding failed inside the run with a bare TypeError.
        (
            {"target": "scripted:x", "settings": {"temperature": Decimal("0.2")}},
            r"model role 'support': settings.temperature is a Decimal",
        ),
        ({"target": "scripted:x", "settings": {"stop": {"END"}}}, r"model role 'support': settings.stop is a set"),
    ],
)
def test_a_profile_the_resolver_would_misread_is_refused(profile, match):
    """The spec's profile is ``{target: ..., settings: {temperature: 0.2}}``."""
    with pytest.raises(ConfigurationError, match=match):
        ModelResolver(profiles={"support": profile})


def test_a_bad_profile_fails_the_ask_with_a_configuration_error(config):
    configure(models={"support": {"target": "scripted:x", "settings": "hot"}})

    class HotAgent(Agent):
        model = "support"

    with pytest.raises(ConfigurationError, match="settings must be a mapping"):
        HotAgent.ask("hi")


def test_provider_adapters_keyword_and_providers_attribute_as_in_the_spec(script):
    """``ModelResolver.new(providers:, profiles:, default_model:, provider_adapters:)`` and ``#providers``."""

    class GatewayProvider(ScriptedProvider):
        pass

    resolver = ModelResolver(
        providers={"gateway": {"adapter": "gateway"}}, provider_adapters={"gateway": GatewayProvider}
    )
    target = script([{"text": "unused"}])

    model = resolver.resolve("gateway:" + target.split(":", 1)[1])

    assert type(model.provider) is GatewayProvider
    assert resolver.providers["gateway"] == {"adapter": "gateway"}


def test_profiles_given_to_resolve_apply_to_that_call_only(script):
    """The spec's ``resolve(selection, profiles:)``: a per-call role mapping for role selections."""
    base, premium = script([{"text": "unused"}]), script([{"text": "unused"}])
    resolver = ModelResolver(profiles={"support": {"target": base}}, default_model="support")

    override = {"support": {"target": premium, "settings": {"temperature": 0.0}}}
    model = resolver.resolve("support", profiles=override)

    assert (model.target, model.role, model.settings) == (premium, "support", {"temperature": 0.0})
    assert resolver.resolve(None, profiles=override).target == premium
    assert resolver.resolve("support").target == base
    assert resolver.resolve(base, invocation=None, context=None).target == base
    with pytest.raises(ConfigurationError, match="model role 'support' has unknown key 'temperature'"):
        resolver.resolve("support", profiles={"support": {"target": premium, "temperature": 0.0}})


def test_model_resolver_returns_the_active_configurations_resolver(config, script):
    """The spec's ``LittleGhost.model_resolver`` and ``Runtime#model_resolver``."""
    target = script([{"text": "unused"}])
    lg_core.configure(models={"customer_support": {"target": target}})

    resolver = lg_core.model_resolver()

    assert resolver is config.runtime().model_resolver is config.runtime().resolver
    assert resolver.resolve("customer_support").target == target


class InvocationAwareResolver(ModelResolver):
    """An application resolver: premium invocations go to another model."""

    def __init__(self, standard: str, premium: str) -> None:
        super().__init__()
        self.standard, self.premium, self.closed = standard, premium, False

    def resolve(self, selection, *, invocation=None, **options):
        premium = invocation is not None and invocation.fetch("premium_account", False)
        return super().resolve(self.premium if premium else self.standard, **options)

    def close(self) -> None:
        self.closed = True


def test_configure_model_resolver_installs_a_complete_override(config, script):
    """The spec's ``config.model_resolver = ...``: runtimes use it instead of building one, and
    it stays the application's (the runtime does not close it)."""
    resolver = InvocationAwareResolver(script([{"text": "standard"}]), script([{"text": "premium"}]))
    configure(model_resolver=resolver)

    class AnyModelAgent(Agent):
        model = "ignored_by_this_resolver"

    assert AnyModelAgent.ask("hi", premium_account=True).response == "premium"
    assert config.runtime().model_resolver is resolver
    config.close()
    assert not resolver.closed


SHARED_RESOLVER = ModelResolver(profiles={"support": {"target": "scripted:shared"}})


def test_model_resolver_can_be_named_by_import_path_for_workers_and_yaml():
    configuration = Configuration(model_resolver=f"{__name__}:SHARED_RESOLVER")
    assert configuration.model_resolver is SHARED_RESOLVER


@pytest.mark.parametrize(
    ("value", "match"),
    [
        (ModelResolver, r"model_resolver: must be a resolver instance"),
        ("no_such_module:resolver", r"model_resolver: 'no_such_module:resolver' cannot be imported"),
        (42, r"model_resolver: must be a resolver instance"),
    ],
)
def test_a_model_resolver_that_is_not_one_is_a_configuration_error(value, match):
    with pytest.raises(ConfigurationError, match=match):
        Configuration(model_resolver=value)


class UnbuildableProvider(ScriptedProvider):
    def __init__(self, connection, options=None):
        raise KeyError("region")


def test_an_adapter_that_cannot_be_constructed_raises_adapter_load_error():
    """Spec: AdapterLoadError is "raised when a configured provider adapter cannot be constructed"
    (a raw KeyError from the application's adapter reached ask() before)."""
    resolver = ModelResolver(
        providers={"gateway": {"adapter": "gateway"}}, provider_adapters={"gateway": UnbuildableProvider}
    )
    with pytest.raises(
        AdapterLoadError,
        match=r"provider connection 'gateway': the 'gateway' adapter .* could not be constructed: KeyError",
    ):
        resolver.resolve("gateway:model-x")


@pytest.mark.parametrize(
    "selection",
    [
        {"provider": "primary:openai", "model": "gpt-4o"},
        {"provider": "primary", "model": 5},
        {"provider": 5, "model": "m"},
    ],
)
def test_an_inline_mapping_naming_no_connection_is_refused(selection):
    """``provider`` names a configured connection; 'primary:openai' quietly selected connection 'primary' before."""
    resolver = ModelResolver(providers={"primary": {"adapter": "scripted"}})
    with pytest.raises(
        ConfigurationError, match=r"an inline model mapping's 'provider' is a configured connection's name"
    ):
        resolver.resolve(selection)


@pytest.mark.parametrize(("keyword", "kind"), [("providers", "provider connection"), ("profiles", "model role")])
def test_a_connection_or_role_that_is_not_a_mapping_is_a_configuration_error(keyword, kind):
    with pytest.raises(ConfigurationError, match=f"{kind} 'support' must be a mapping such as"):
        ModelResolver(**{keyword: {"support": "scripted"}})


def test_an_inline_mapping_with_settings_that_are_not_json_is_refused():
    with pytest.raises(ConfigurationError, match=r"model 'scripted:x': settings.temperature is a Decimal"):
        ModelResolver().resolve({"provider": "scripted", "model": "x", "temperature": Decimal("0.2")})


def test_an_inline_mapping_with_nested_settings_shows_the_flat_form():
    """Spec (Agent.model): "Inline mappings use flat settings"; nested ones went to the API as a 'settings' field."""
    with pytest.raises(
        ConfigurationError, match=r"takes its settings flat.*'model': 'x', 'temperature': 0.2\}, not under 'settings'"
    ):
        ModelResolver().resolve({"provider": "scripted", "model": "x", "settings": {"temperature": 0.2}})


def test_provider_credentials_add_options_when_a_connection_is_first_built(config):
    """The spec's ``config.provider_credentials``: a trusted callable returns credential options for
    a named connection, merged into its configuration when its provider is constructed."""
    asked = []

    def vault(provider, adapter, configuration):
        asked.append((provider, adapter, configuration))
        return {"api_key": "sk-from-vault"} if provider == "primary" else None

    configure(providers={"primary": {"adapter": "openai", "organization": "org-1"}}, provider_credentials=vault)
    resolver = lg_core.model_resolver()

    model = resolver.resolve("primary:gpt-4o-mini")
    resolver.resolve("primary:gpt-4o")

    assert model.provider.settings.resolve_api_key() == "sk-from-vault"
    assert asked == [("primary", "openai", {"organization": "org-1"})]  # once per connection and runtime


@pytest.mark.parametrize(
    ("credentials", "match"),
    [
        (lambda **_: 1 / 0, r"provider connection 'primary': provider_credentials raised ZeroDivisionError"),
        (lambda **_: "sk-bare-key", r"provider_credentials returned str; return a mapping of connection options"),
    ],
)
def test_provider_credentials_that_cannot_give_credentials_raise_credential_error(credentials, match):
    from lg_core import CredentialError

    resolver = ModelResolver(providers={"primary": {"adapter": "openai"}}, credential_resolver=credentials)
    with pytest.raises(CredentialError, match=match):
        resolver.resolve("primary:gpt-4o-mini")


def vault_credentials(provider, adapter, configuration):
    return {"api_key": "sk-from-vault"}


def test_provider_credentials_can_be_named_by_import_path():
    assert Configuration(provider_credentials=f"{__name__}:vault_credentials").provider_credentials is vault_credentials
    with pytest.raises(ConfigurationError, match="provider_credentials must be a function"):
        Configuration(provider_credentials=42)


def test_settings_a_configured_resolver_replaces_are_named_in_a_warning(script):
    """model_resolver is a complete override: roles and connections configured beside it are never
    read, so building the runtime says which, instead of letting an edited role seem to do nothing."""
    resolver = ModelResolver(profiles={"support": {"target": script([{"text": "hi"}])}})
    configuration = Configuration(
        model_resolver=resolver, models={"support": {"target": "scripted:other"}}, default_model="support"
    )
    with pytest.warns(ConfigurationWarning, match=r"models, default_model are not read"):
        assert configuration.runtime().model_resolver is resolver
    configuration.close()


def test_a_configured_resolver_alone_builds_without_a_warning():
    configuration = Configuration(model_resolver=ModelResolver())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        configuration.runtime()
    configuration.close()


@pytest.mark.parametrize(
    "target", ["scripted:demo ", " scripted:demo", "scripted: demo", "scripted :demo", "scri pted:demo"]
)
def test_a_target_with_stray_whitespace_is_refused_with_the_fixed_spelling(target):
    with pytest.raises(ConfigurationError, match=r"has a space around the connection or the model id"):
        ModelResolver().resolve(target)


@pytest.mark.parametrize(("setting", "variable"), [("lease_seconds", "7"), ("max_parallel_tools", "4")])
def test_a_bad_value_given_to_configure_is_not_blamed_on_the_environment(config, monkeypatch, setting, variable):
    """configure(lease_seconds="x") with a good $LG_LEASE_SECONDS set said "(from $LG_LEASE_SECONDS)"."""
    monkeypatch.setenv(f"LG_{setting.upper()}", variable)
    with pytest.raises(ConfigurationError) as raised:
        configure(**{setting: "x"})
    message = str(raised.value)
    assert message.startswith(f"invalid configuration: {setting}: "), message
    assert "$LG_" not in message
