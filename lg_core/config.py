"""Configuration: one settings object read by every process.

Values come from ``configure(...)`` (highest), then environment variables
(``LG_RUN_STORE``, ``LG_BROKER_URL``, ``LG_IMPORTS`` ...), then the YAML config
file (``lg.yaml`` in the working directory, or the file named by ``LG_CONFIG``;
same keys as :class:`Configuration`), then defaults. One file read the same way
by the web app, workers, the scheduler and the CLI is how a fleet agrees on its
settings without repeating them in every process's environment. The
shared Runtime is built from the configuration on first use and the
configuration is locked from then on, so every request sees one stable setup;
``with_configuration`` selects an independent configuration (and Runtime) for
one block, which is also how tests isolate themselves.
"""

from __future__ import annotations

import contextvars
import difflib
import os
import pkgutil
import re
import threading
import warnings
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Annotated, Any, cast

from pydantic import Field, PrivateAttr, ValidationError, ValidationInfo, field_validator
from pydantic_settings import (
    BaseSettings,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    SettingsError,
)

from lg_core import _config_validators as checks
from lg_core._config_locks import locked, locked_message, unlocked
from lg_core.config_sources import (
    CONFIG_FILE_ENV,
    ENV_PREFIX,
    YamlFileSource,
    describe_settings_error,
    describe_validation_error,
    did_you_mean,
    import_cause,
    too_deep_variable,
)
from lg_core.datamap import MAX_JSON_DEPTH, nests_deeper_than
from lg_core.engine.recent_dict import DEFAULT_RUN_CACHE_SIZE
from lg_core.errors import ConfigurationError
from lg_core.sessions.declaration import check_declaration
from lg_core.store.database import DEFAULT_POOL_SIZE
from lg_core.store.store_urls import expand_sqlite_home
from lg_core.urls import safe_url

if TYPE_CHECKING:
    from lg_core.runtime import Runtime

# The Runtime a configuration builds, named by import path as the other components it builds are
# (session store providers, provider adapters, the Celery backend's entry point): settings sit
# below the layers they configure, so this module imports none of them.
RUNTIME_CLASS = "lg_core.runtime:Runtime"


class ConfigurationWarning(UserWarning):
    """A setting that is probably not what its author meant (e.g. a misspelled ``LG_*`` variable)."""


class Configuration(BaseSettings):
    """Every LittleGhost setting, with its environment variable ``LG_<NAME>``."""

    # env_ignore_empty: `export LG_RUN_STORE=` unsets a setting, as an emptied LG_BROKER_URL always did.
    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX, env_ignore_empty=True, extra="forbid", validate_assignment=True
    )

    run_store: str = Field("sqlite://", description="SQLAlchemy URL of the run store; in-memory SQLite by default")
    broker_url: str | None = Field(None, description="Celery broker URL (Redis) for distributed runs")
    imports: Annotated[list[str], NoDecode] = Field(default_factory=list, description="modules workers import")
    providers: dict[str, dict[str, Any]] = Field(default_factory=dict, description="provider connections by name")
    provider_adapters: dict[str, Any] = Field(
        default_factory=dict,
        description=(
            "application provider adapters by name: {'gateway': 'myapp.providers:GatewayProvider'} or the "
            "Provider subclass itself; a connection selects one with {'adapter': 'gateway'}"
        ),
    )
    provider_credentials: Any = Field(
        None,
        description=(
            "returns credential options for a provider connection (the spec's provider_credentials): a function "
            "(provider=NAME, adapter=ADAPTER, configuration=OPTIONS) -> {'api_key': ...} or None, or its import path "
            "'module:function'; asked when a connection's provider is first built in a runtime, and merged over "
            "the connection's options"
        ),
    )
    models: dict[str, dict[str, Any]] = Field(
        default_factory=dict, description="model roles: {role: {target, settings}}"
    )
    default_model: str | None = None
    model_resolver: Any = Field(
        None,
        description=(
            "a complete resolver override (the spec's Configuration#model_resolver): a ModelResolver, or any "
            "object whose resolve(selection, *, invocation=None, ...) returns a Model, or its import path "
            "'module:attribute'; unset, the runtime builds a ModelResolver from providers, models, "
            "default_model and provider_adapters. The application owns it: runtimes do not close it"
        ),
    )
    rate_limits: dict[str, str] = Field(
        default_factory=dict,
        description=(
            "model-call rate limits by provider connection, e.g. {'openai': '600/min'}: every run's model calls "
            "on that connection are paced unless the run has its own rate_limit (lg_core.rate_limit)"
        ),
    )
    hooks: list[Any] = Field(default_factory=list, description="Runtime Hook classes")
    lease_seconds: float = Field(15.0, gt=0, le=3600, allow_inf_nan=False)
    relay_grace: float = Field(
        30.0,
        gt=0,
        le=3600,
        allow_inf_nan=False,
        description="seconds a scheduled step may wait for its message before the outbox relay re-sends it",
    )
    relay_backoff_max: float = Field(
        300.0,
        gt=0,
        le=86400,
        allow_inf_nan=False,
        description=(
            "the longest the outbox relay waits between sends of a step no worker consumes: each send that found "
            "no consumer doubles the wait from relay_grace up to this (never below relay_grace), so a queue without "
            "workers gets one duplicate per step every this many seconds, not one every relay_grace; the lease "
            "sweeper's re-sends of a step whose holder died back off the same way, from the lease"
        ),
    )
    max_step_attempts: int = Field(
        10,
        ge=1,
        le=1000,
        description=(
            "attempts a distributed step gets (its worker died, or the attempt raised) before its run fails "
            "instead of retrying forever; `lg runs retry` then gives it as many again"
        ),
    )
    store_outage_patience: float = Field(
        300.0,
        ge=0,
        le=86400,
        allow_inf_nan=False,
        description=(
            "seconds a step keeps trying a run store it cannot reach (a database restart or failover), after the "
            "store's own few seconds of retries: its commit, the reads and marks on its way, and the confirmation "
            "of its lease once that ran out. The model turn or tool call goes on and is committed once the "
            "database is back, not run again; 0 gives up at once (the attempt fails and the step runs again, or "
            "a local ask raises StoreUnavailableError)"
        ),
    )
    run_retention: str | None = Field(
        None,
        description=(
            "how long finished runs are kept, e.g. '30d': `lg scheduler` (or the lg.recover beat task) prunes "
            "older ones every hour, as `lg runs prune --older-than` does; unset, runs are kept until pruned"
        ),
    )
    sqlite_synchronous: str = Field("FULL", description="SQLite synchronous pragma for file stores")
    store_pool_size: int = Field(
        DEFAULT_POOL_SIZE,
        ge=1,
        le=1000,
        description=(
            "PostgreSQL connections a process opens at most and keeps for its next burst (a thread holds one "
            "only while it reads or writes the store, never across a model call; more threads than this wait "
            "their turn): size the server's max_connections for this many per process"
        ),
    )
    max_parallel_tools: int = Field(8, ge=1, le=256)
    run_cache_size: int = Field(
        DEFAULT_RUN_CACHE_SIZE,
        ge=1,
        description=(
            "runs a process keeps in memory between their steps (each a few KiB); "
            "above a worker's runs in flight, a step does not reload its run"
        ),
    )
    session_store: Any = Field(
        "sql",
        description=(
            "where sessions live: 'sql' (the run store's database), 'memory', 'none', "
            "{'provider': 'filesystem', 'root': DIR}, {'provider': 'sql', 'url': URL}, or a SessionStore"
        ),
    )
    session_actor: Any = Field(
        None,
        description=(
            "derives the persistence actor of each invocation: a callable (invocation) -> actor id or None, "
            "or its import path 'module:function'; unset, it is the invocation's actor_id"
        ),
    )
    workspace: Any = Field(
        None,
        description=(
            "each run's Workspace, opened by every tool-call step that uses it: {'root': '/srv/lg/runs/{run_id}', "
            "'paths': {...}, 'setup': f}, a factory (run_id=, invocation=) -> Workspace, or 'module:function'; "
            "the root must be a host path every worker reaches (lg_core.sandbox.run_resources)"
        ),
    )
    sandbox: Any = Field(
        None,
        description=(
            "each run's Sandbox around its workspace: a backend name ('bubblewrap', 'native', 'unrestricted'), "
            "{'provider': ..., 'files': ..., 'network': ..., 'limits': ...}, a factory (workspace=) -> Sandbox, "
            "or 'module:function'; unset, runs have no sandbox and the built-in file and shell tools refuse to run"
        ),
    )
    service_name: str = "littleghost"

    _runtime: Any = PrivateAttr(default=None)
    _lock: Any = PrivateAttr(default_factory=threading.Lock)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Precedence: configure()/keyword values > environment > YAML config file > defaults."""
        return (init_settings, env_settings, YamlFileSource(settings_cls, Configuration.model_fields))

    @field_validator("run_store")
    @classmethod
    def _run_store_home(cls, value: str) -> str:
        """``sqlite:///~/runs.db`` names the file in the home directory, as ``LG_CONFIG=~/lg.yaml``
        does, for every process and check that reads the setting (SQLite would not expand it)."""
        return expand_sqlite_home(value)

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_numbers(cls, value: Any, info: ValidationInfo) -> Any:
        """Refuse True/False for a number: pydantic would take it as 1 or 0, and YAML reads
        ``yes``, ``on`` and ``true`` as booleans, so a typo would become a 1-second lease or a
        single step attempt. Refused from every source: arguments, variables and lg.yaml."""
        if isinstance(value, bool) and info.field_name in _NUMERIC_FIELDS:
            kind = _NUMERIC_FIELDS[info.field_name]
            raise ValueError(
                f"Input should be a valid {kind}, not the boolean {value} (YAML reads yes, no, on, off, "
                "true and false as booleans): write a number"
            )
        return value

    @field_validator("*", mode="before")
    @classmethod
    def _not_too_deep(cls, value: Any) -> Any:
        """Refuse a value nested deeper than stored JSON may be: settings are a few levels of
        mappings, and a value hundreds of levels deep would end in a RecursionError wherever it is
        next walked (copied, compared, sent) rather than in a message naming the setting."""
        if nests_deeper_than(value, MAX_JSON_DEPTH):
            raise ValueError(
                f"nests too deeply: a setting may nest at most {MAX_JSON_DEPTH} levels of mappings and lists"
            )
        return value

    @field_validator("imports", mode="before")
    @classmethod
    def _split_imports(cls, value: Any) -> Any:
        if isinstance(value, str):
            return [part.strip() for part in value.split(",") if part.strip()]
        return value

    @field_validator("broker_url")
    @classmethod
    def _redis_broker(cls, value: str | None) -> str | None:
        return checks.checked_broker_url(value)

    @field_validator("rate_limits")
    @classmethod
    def _rate_limits(cls, value: dict[str, str]) -> dict[str, str]:
        return checks.checked_rate_limits(value)

    @field_validator("provider_adapters")
    @classmethod
    def _provider_adapters(cls, value: dict[str, Any]) -> dict[str, Any]:
        """Import and check every adapter now: a typo in a path fails at configuration time, naming
        the adapter, not at the first model call of a run on a worker."""
        return {name: checks.provider_class(name, adapter) for name, adapter in value.items()}

    @field_validator("run_retention")
    @classmethod
    def _run_retention(cls, value: str | None) -> str | None:
        return checks.checked_run_retention(value)

    @field_validator("session_store", mode="before")
    @classmethod
    def _session_store(cls, value: Any) -> Any:
        return check_declaration(value)

    @field_validator("workspace", mode="before")
    @classmethod
    def _workspace(cls, value: Any) -> Any:
        from lg_core.sandbox.run_resources import checked_workspace_setting  # the sandbox package, on first use

        return checked_workspace_setting(value)

    @field_validator("sandbox", mode="before")
    @classmethod
    def _sandbox(cls, value: Any) -> Any:
        from lg_core.sandbox.run_resources import checked_sandbox_setting

        return checked_sandbox_setting(value)

    @field_validator("session_actor", mode="before")
    @classmethod
    def _session_actor(cls, value: Any) -> Any:
        return checks.checked_session_actor(value)

    @field_validator("provider_credentials", mode="before")
    @classmethod
    def _provider_credentials(cls, value: Any) -> Any:
        return checks.function_setting(
            value, "provider_credentials", "a function (provider, adapter, configuration) -> credential options"
        )

    @field_validator("model_resolver", mode="before")
    @classmethod
    def _model_resolver(cls, value: Any) -> Any:
        return checks.checked_model_resolver(value)

    @field_validator("hooks")
    @classmethod
    def _hook_classes(cls, value: list[Any]) -> list[Any]:
        return checks.checked_hooks(value)

    def __init__(self, **values: Any) -> None:
        """Build from keyword values, ``lg.yaml`` and ``LG_*``; a bad value is a ConfigurationError naming it."""
        try:
            super().__init__(**values)
        except ValidationError as exc:
            raise ConfigurationError(describe_validation_error(exc, values)) from import_cause(exc)
        except SettingsError as exc:  # an environment variable that should hold JSON does not
            raise ConfigurationError(describe_settings_error(exc)) from None
        except RecursionError:  # json.loads of an LG_* variable nested too deeply to decode
            raise ConfigurationError(too_deep_variable(os.environ)) from None
        _warn_of_misspelled_variables(os.environ)

    def __setattr__(self, name: str, value: Any) -> None:
        if not name.startswith("_") and getattr(self, "_runtime", None) is not None:
            raise ConfigurationError(locked_message(f"set {name}"))
        try:
            super().__setattr__(name, value)
        except ValidationError as exc:  # the value came from the caller, not the environment or a file
            raise ConfigurationError(describe_validation_error(exc, {name: value})) from import_cause(exc)

    def configure(self, **values: Any) -> Configuration:
        """Set several settings and return this configuration (the spec's ``Configuration#configure``;
        ``lg_core.configure(...)`` is this on the active one). An unknown name is refused before any is set."""
        unknown = [name for name in values if name not in type(self).model_fields]
        if unknown:
            raise ConfigurationError(
                f"unknown setting {unknown[0]!r}{did_you_mean(unknown[0], Configuration.model_fields)}; "
                f"known settings: {sorted(type(self).model_fields)}"
            )
        for name, value in values.items():
            setattr(self, name, value)  # ConfigurationError for a bad value
        return self

    def provider_adapter(self, name: str, adapter: Any) -> None:
        """Register a provider adapter under ``name`` (the spec's ``provider_adapter``): a Provider
        subclass or its import path ``module:Class``, built for each connection naming it."""
        self.provider_adapters = {**self.provider_adapters, name: adapter}

    def __repr_args__(self) -> Any:
        """Fields as repr shows them, with passwords in URLs and secret-looking provider options
        masked: a configuration ends up in tracebacks, test failures and logs."""
        for name, value in super().__repr_args__():
            if name in ("run_store", "broker_url") and isinstance(value, str):
                yield name, safe_url(value)
            elif name == "providers" and isinstance(value, Mapping):
                yield name, {connection: _masked(options) for connection, options in value.items()}
            else:
                yield name, value

    def runtime(self) -> Runtime:
        """The shared Runtime for this configuration, built (and the configuration locked) on first use."""
        if self._runtime is None:
            with self._lock:
                if self._runtime is None:
                    self._runtime = _runtime_class()(self)
                    self._set_collections(locked)
        return cast("Runtime", self._runtime)

    def _set_collections(self, convert: Any) -> None:
        """Swap every mapping and list setting for ``convert(value)``: locked copies while the
        runtime runs, so ``config.models["x"] = ...`` raises as assigning does (the runtime
        already read them, and the change would be silently lost), plain ones again after close."""
        for name in type(self).model_fields:
            value = self.__dict__[name]
            if isinstance(value, (dict, list)):
                self.__dict__[name] = convert(value)

    def close(self) -> None:
        """Shut the runtime down (tests and short-lived tools); the configuration becomes editable."""
        with self._lock:
            runtime, self._runtime = self._runtime, None
            if runtime is not None:
                self._set_collections(unlocked)
        if runtime is not None:
            runtime.close()


# The numeric settings and the word pydantic uses for each ("integer", "number"): a bool is refused for them.
_NUMERIC_WORDS: dict[Any, str] = {int: "integer", float: "number"}
_NUMERIC_FIELDS = {
    name: _NUMERIC_WORDS[field.annotation]
    for name, field in Configuration.model_fields.items()
    if field.annotation in (int, float)
}


_SECRET_NAMES = re.compile(r"key|secret|token|password|credential", re.IGNORECASE)


def _masked(options: Any) -> Any:
    """Provider connection options as a repr may show them: the values of secret-looking names
    (``api_key``, ``client_secret`` ...) and of every header are ``***``, and so are a
    ``base_url``'s password and query values; ``api_key_env`` names a variable, so it stays."""
    if not isinstance(options, Mapping):
        return options
    return {name: _masked_option(str(name), value) for name, value in options.items()}


def _masked_option(name: str, value: Any) -> Any:
    if name.lower() == "headers" and isinstance(value, Mapping):
        return {header: "***" for header in value}  # a gateway's key travels in any header
    if name == "base_url" and isinstance(value, str):
        return _masked_base_url(value)
    if isinstance(value, str) and _SECRET_NAMES.search(name) and not name.endswith("_env"):
        return "***"
    if name.lower() == "authorization":
        return "***"
    return _masked(value)


def _masked_base_url(url: str) -> str:
    """``url`` with the password of its userinfo and every query value replaced by ``***``."""
    from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

    parts = urlsplit(safe_url(url))
    query = urlencode([(key, "***") for key, _value in parse_qsl(parts.query, keep_blank_values=True)], safe="*")
    return urlunsplit(parts._replace(query=query))


def _runtime_class() -> Any:
    return pkgutil.resolve_name(RUNTIME_CLASS)


def build_configuration(**values: Any) -> Configuration:
    """A Configuration from keyword values, with ConfigurationError for bad ones."""
    return Configuration(**values)


_default: Configuration | None = None
_default_lock = threading.Lock()
_current: contextvars.ContextVar[Configuration | None] = contextvars.ContextVar("lg_configuration", default=None)


def current_configuration() -> Configuration:
    """The configuration active here: ``with_configuration``'s, else the process default."""
    current = _current.get()
    if current is not None:
        return current
    global _default
    if _default is None:
        with _default_lock:
            if _default is None:
                _default = build_configuration()
    return _default


def configure(**values: Any) -> Configuration:
    """Change the active configuration before its first run; returns it."""
    return current_configuration().configure(**values)


@contextmanager
def with_configuration(config: Configuration) -> Iterator[Configuration]:
    """Make ``config`` (and its own runtime) current for this block."""
    token = _current.set(config)
    try:
        yield config
    finally:
        _current.reset(token)


_warned_variables: set[str] = set()


def _warn_of_misspelled_variables(environ: Mapping[str, str]) -> None:
    """Warn (once per process) of an ``LG_*`` variable that looks like a misspelled setting.

    pydantic-settings ignores variables it does not know, so ``LG_RUNSTORE=...``
    would silently leave runs in memory. Only near misses are reported: other
    tools may use the ``LG_`` prefix for names of their own.
    """
    known = [ENV_PREFIX + name.upper() for name in Configuration.model_fields] + [CONFIG_FILE_ENV]
    for name in environ:
        if not name.startswith(ENV_PREFIX) or name in known or name in _warned_variables:
            continue
        close = difflib.get_close_matches(name, known, n=1, cutoff=0.85)
        if close:
            _warned_variables.add(name)
            warnings.warn(
                f"${name} is not a LittleGhost setting and is ignored; did you mean ${close[0]}?",
                ConfigurationWarning,
                stacklevel=3,
            )


__all__ = [
    "Configuration",
    "ConfigurationWarning",
    "build_configuration",
    "configure",
    "current_configuration",
    "with_configuration",
]
