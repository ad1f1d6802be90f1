"""Model resolution: roles, ``connection:model`` targets and inline mappings.

A selection names *what* to call; the resolver owns *how*: it looks up the
configured connection, builds (and caches) its provider, and merges profile
settings. Role names cannot contain ``:`` because that marks a target.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from lg_core.datamap import to_json_value
from lg_core.errors import AdapterLoadError, ConfigurationError, CredentialError
from lg_core.events import StreamEvent
from lg_core.models.request import ModelCapabilities, ModelRequest
from lg_core.providers import BUILTIN_ADAPTERS, adapter_class

if TYPE_CHECKING:
    from lg_core.providers.base import Provider

# Connections that need no configuration: the offline scripted models, and OpenRouter with
# the key in $OPENROUTER_API_KEY (the spec's first example). A configured connection of the
# same name replaces them.
BUILTIN_CONNECTIONS: dict[str, dict[str, Any]] = {
    "openrouter": {"adapter": "openrouter"},
    "scripted": {"adapter": "scripted"},
}
# What an agent without a model runs on when the application configured no connection and no role.
CONVENTIONAL_KEY_VARIABLE = "OPENROUTER_API_KEY"
CONVENTIONAL_TARGET = "openrouter:openai/gpt-5.6-luna"


class Model:
    """A resolved, executable model: provider + target + default settings."""

    def __init__(
        self,
        provider: Provider,
        target: str,
        settings: Mapping[str, Any] | None = None,
        role: str | None = None,
    ) -> None:
        self.provider = provider
        self.target = target
        self.settings = dict(settings or {})
        self.role = role

    @property
    def model_id(self) -> str:
        return self.target.split(":", 1)[1]

    @property
    def connection(self) -> str:
        """The provider connection's name (``openai`` in ``openai:gpt-4o``): rate limits are kept per connection."""
        return self.provider.connection

    @property
    def capabilities(self) -> ModelCapabilities:
        return self.provider.capabilities(self.model_id)

    def stream(self, request: ModelRequest) -> Iterator[StreamEvent]:
        """Stream ``request``; request settings override profile defaults."""
        if self.settings:
            request = request.replace(settings={**self.settings, **request.settings})
        return self.provider.stream(request, self.model_id)

    def __repr__(self) -> str:
        return f"Model({self.target!r}, role={self.role!r})"


class ModelResolver:
    """Maps a role, target or inline mapping to an executable :class:`Model`."""

    def __init__(
        self,
        providers: Mapping[str, Mapping[str, Any]] | None = None,
        profiles: Mapping[str, Mapping[str, Any]] | None = None,
        default_model: str | None = None,
        provider_adapters: Mapping[str, type[Provider]] | None = None,
        credential_resolver: Callable[..., Mapping[str, Any] | None] | None = None,
    ) -> None:
        """Keywords as on the spec's ``ModelResolver.new``: ``profiles`` are the roles
        (``configure(models=...)``), ``provider_adapters`` the application's adapters by name,
        ``credential_resolver`` the application's ``provider_credentials``."""
        self.connections = {
            **BUILTIN_CONNECTIONS,
            **_mappings(providers, "provider connection", "{'adapter': 'openrouter'}"),
        }
        self.profiles = _mappings(profiles, "model role", "{'target': 'connection:model-id'}")
        self.default_model = default_model
        self._unconfigured = not providers and not profiles
        # An adapter is a Provider class, or a built-in's 'module:Class' path imported on first use.
        self.adapters: dict[str, type[Provider] | str] = {**BUILTIN_ADAPTERS, **(provider_adapters or {})}
        self.credential_resolver = credential_resolver
        self._providers: dict[str, Provider] = {}
        self._lock = threading.Lock()
        for role, profile in self.profiles.items():
            _check_profile(role, profile)

    @property
    def providers(self) -> dict[str, dict[str, Any]]:
        """The provider connections by name (the spec's ``ModelResolver#providers``), built-in ones included."""
        return self.connections

    def resolve(
        self,
        selection: Any,
        *,
        invocation: Any = None,
        context: Any = None,
        profiles: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> Model:
        """Resolve a role name, a ``connection:model`` target, or an inline mapping.

        As the spec's ``resolve(selection, invocation:, context:, profiles:)``: ``profiles``
        adds or replaces roles for this call only (trusted application values, never read
        from ``invocation``); ``invocation`` and ``context`` are accepted for resolvers that
        subclass this one and choose by them.
        """
        if selection is None:
            selection = self._default_selection()
        if isinstance(selection, Mapping):
            return self._inline(selection)
        if not isinstance(selection, str) or not selection.strip():
            raise ConfigurationError(f"a model selection must be a role, a target or a mapping, got {selection!r}")
        if ":" in selection:
            return self._target(selection, {}, role=None)
        return self._role(selection, self._with_call_profiles(profiles))

    def _with_call_profiles(self, profiles: Mapping[str, Mapping[str, Any]] | None) -> dict[str, dict[str, Any]]:
        """The configured roles with one call's ``profiles`` over them, each checked as configured ones are."""
        if not profiles:
            return self.profiles
        if not isinstance(profiles, Mapping):
            raise ConfigurationError(
                f"profiles must map role names to {{'target': ..., 'settings': ...}}, got {profiles!r}"
            )
        extra = _mappings(profiles, "model role", "{'target': 'connection:model-id'}")
        for role, profile in extra.items():
            _check_profile(role, profile)
        return {**self.profiles, **extra}

    def _default_selection(self) -> str:
        """``default_model``; with no connection or role configured, the spec's conventional default.

        The spec's resolver: "With neither [providers nor profiles], conventional
        credentials select GPT-5.6 Luna", i.e. the built-in ``openrouter``
        connection when ``OPENROUTER_API_KEY`` is set.
        """
        if self.default_model is not None:
            return self.default_model
        if self._unconfigured and os.environ.get(CONVENTIONAL_KEY_VARIABLE):
            return CONVENTIONAL_TARGET
        raise ConfigurationError(
            'no model selected: set `model = "connection:model-id"` on the agent or configure(default_model=...)'
            + ("" if not self._unconfigured else f", or set {CONVENTIONAL_KEY_VARIABLE} to use {CONVENTIONAL_TARGET}")
        )

    def _role(self, role: str, profiles: Mapping[str, Mapping[str, Any]]) -> Model:
        profile = profiles.get(role)
        if profile is None:
            known = ", ".join(sorted(profiles)) or "none"
            raise ConfigurationError(
                f"unknown model role {role!r} (configured roles: {known}); "
                "use a 'connection:model-id' target or add the role to configure(models=...)"
            )
        target = profile.get("target")
        if not isinstance(target, str) or ":" not in target:
            raise ConfigurationError(f"model role {role!r} needs a 'target' of the form 'connection:model-id'")
        return self._target(target, profile.get("settings") or {}, role=role)

    def _inline(self, selection: Mapping[str, Any]) -> Model:
        provider, model = selection.get("provider"), selection.get("model")
        if not provider or not model:
            raise ConfigurationError("an inline model mapping needs 'provider' and 'model'")
        if not isinstance(provider, str) or ":" in provider or not isinstance(model, str):
            # {"provider": "primary:openai", ...} would quietly select connection 'primary'.
            raise ConfigurationError(
                "an inline model mapping's 'provider' is a configured connection's name (no ':') and its "
                f"'model' the provider's model id, both strings; got provider={provider!r}, model={model!r}"
            )
        if "settings" in selection:
            # A role's profile nests its settings; an inline mapping's are flat (the spec's
            # model(provider:, model:, reasoning_effort: "high")). Nested, they reached the
            # provider's API as one unknown "settings" field.
            raise ConfigurationError(
                "an inline model mapping takes its settings flat, beside provider and model: "
                f"{{'provider': {provider!r}, 'model': {model!r}, 'temperature': 0.2}}, not under 'settings'"
            )
        settings = {k: v for k, v in selection.items() if k not in ("provider", "model")}
        return self._target(f"{provider}:{model}", settings, role=None)

    def _target(self, target: str, settings: Mapping[str, Any], role: str | None) -> Model:
        connection, _, model_id = target.partition(":")
        if not connection or not model_id:
            raise ConfigurationError(f"model target {target!r} must look like 'connection:model-id'")
        if connection != connection.strip() or model_id != model_id.strip() or any(c.isspace() for c in connection):
            # 'openai:gpt-4o ' would reach the provider as an unknown model id, far from the typo.
            raise ConfigurationError(
                f"model target {target!r} has a space around the connection or the model id; "
                f"write it as {connection.strip() + ':' + model_id.strip()!r}"
            )
        return Model(self._provider(connection), target, _json_settings(settings, f"model {target!r}"), role)

    def _provider(self, connection: str) -> Provider:
        with self._lock:
            provider = self._providers.get(connection)
            if provider is None:
                provider = self._build(connection)
                self._providers[connection] = provider
            return provider

    def _build(self, connection: str) -> Provider:
        options = self.connections.get(connection)
        if options is None:
            known = ", ".join(sorted(self.connections))
            raise ConfigurationError(
                f"no provider connection named {connection!r} (known: {known}); "
                f"add it with configure(providers={{{connection!r}: {{'adapter': ...}}}})"
            )
        adapter = options.get("adapter", connection)
        registered = self.adapters.get(str(adapter))
        if registered is None:
            raise AdapterLoadError(
                f"connection {connection!r} uses unknown adapter {adapter!r}; "
                f"available adapters: {', '.join(sorted(self.adapters))}"
            )
        cls = self.adapters[str(adapter)] = adapter_class(registered)
        options = {k: v for k, v in options.items() if k != "adapter"}
        options.update(self._credentials(connection, str(adapter), options))
        try:
            return cls(connection, options)
        except ConfigurationError:
            raise  # the adapter's own words about a bad option
        except Exception as exc:  # an application adapter's constructor failed
            raise AdapterLoadError(
                f"provider connection {connection!r}: the {adapter!r} adapter ({cls.__module__}.{cls.__qualname__}) "
                f"could not be constructed: {type(exc).__name__}: {exc}; adapters are built as "
                "Adapter(connection_name, options)"
            ) from exc

    def _credentials(self, connection: str, adapter: str, options: Mapping[str, Any]) -> Mapping[str, Any]:
        """The options the application's ``provider_credentials`` adds to ``connection`` (the spec's
        Providers::Configuration#credentials): asked when the connection's provider is built, the
        first time a model on it is resolved in this runtime, so secrets are fetched lazily."""
        if self.credential_resolver is None:
            return {}
        try:
            extra = self.credential_resolver(provider=connection, adapter=adapter, configuration=dict(options))
        except Exception as exc:
            raise CredentialError(
                f"provider connection {connection!r}: provider_credentials raised {type(exc).__name__}: {exc}"
            ) from exc
        if extra is None:
            return {}
        if not isinstance(extra, Mapping):
            raise CredentialError(
                f"provider connection {connection!r}: provider_credentials returned {type(extra).__name__}; return "
                "a mapping of connection options such as {'api_key': ...}, or None to add none"
            )
        return extra

    def close(self) -> None:
        with self._lock:
            providers, self._providers = list(self._providers.values()), {}
        for provider in providers:
            provider.close()


def _mappings(values: Mapping[str, Any] | None, kind: str, example: str) -> dict[str, dict[str, Any]]:
    """Copies of named option mappings, refusing an entry that is not one (a raw ValueError from dict() before)."""
    copied = {}
    for name, options in (values or {}).items():
        if not isinstance(options, Mapping):
            raise ConfigurationError(f"{kind} {name!r} must be a mapping such as {example}, got {options!r}")
        copied[str(name)] = dict(options)
    return copied


# What a role's profile may hold (the spec's `{target: "primary:openai/gpt-5.6-luna", settings: {temperature: 0.2}}`).
PROFILE_KEYS = ("target", "settings")


def _check_profile(role: str, profile: Mapping[str, Any]) -> None:
    """Refuse a profile the resolver would misread: a role spelled like a target, no target,
    settings that are not a mapping (a raw ValueError at the first ask before), or a key it
    would ignore (``temperature`` written beside ``target`` instead of under ``settings``
    silently ran with the provider's default)."""
    if ":" in role:
        raise ConfigurationError(f"model role {role!r} contains ':'; that syntax is reserved for targets")
    unknown = sorted(str(key) for key in profile if key not in PROFILE_KEYS)
    if unknown:
        raise ConfigurationError(
            f"model role {role!r} has unknown key {unknown[0]!r}; a role is "
            "{'target': 'connection:model-id', 'settings': {...}}, with model settings such as "
            "temperature under 'settings'"
        )
    target = profile.get("target")
    if not isinstance(target, str) or ":" not in target.strip(":"):
        raise ConfigurationError(
            f"model role {role!r} needs a 'target' of the form 'connection:model-id', got {target!r}"
        )
    settings = profile.get("settings")
    if settings is not None and not isinstance(settings, Mapping):
        raise ConfigurationError(
            f"model role {role!r}: settings must be a mapping such as {{'temperature': 0.2}}, "
            f"got {type(settings).__name__} {settings!r}"
        )
    _json_settings(settings or {}, f"model role {role!r}")


def _json_settings(settings: Mapping[str, Any], owner: str) -> Mapping[str, Any]:
    """``settings`` unchanged if they are JSON values (they go into the request body), else ConfigurationError.

    Checked when the role is configured or the model resolved, not when the body is encoded
    inside a run, where a Decimal or a set failed it with a bare TypeError.
    """
    try:
        to_json_value(dict(settings), path="settings")
    except (TypeError, ValueError) as exc:
        raise ConfigurationError(f"{owner}: {exc}") from None
    return settings


__all__ = ["Model", "ModelResolver"]
