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
import inspect
import json
import os
import re
import threading
import warnings
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field, PrivateAttr, ValidationError, ValidationInfo, field_validator
from pydantic_settings import (
    BaseSettings,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    SettingsError,
    YamlConfigSettingsSource,
)

from lg_core.datamap import MAX_JSON_DEPTH, nests_deeper_than
from lg_core.engine.recent_dict import DEFAULT_RUN_CACHE_SIZE
from lg_core.errors import ConfigurationError
from lg_core.events import is_async_consumer
from lg_core.import_path import import_callable, import_failure
from lg_core.store.database import DEFAULT_POOL_SIZE, expand_sqlite_home
from lg_core.urls import safe_url

ENV_PREFIX = "LG_"
# What a JSON-valued environment variable looks like, for the error message of a bad one.
_JSON_EXAMPLES = {
    "rate_limits": '{"openai": "600/min"}',
    "provider_adapters": '{"gateway": "myapp.providers:GatewayProvider"}',
    "providers": '{"primary": {"adapter": "openrouter", "api_key_env": "OPENROUTER_API_KEY"}}',
    "models": '{"customer_support": {"target": "primary:openai/gpt-5.6-luna", "settings": {"temperature": 0.2}}}',
}
# The broker URL schemes that both Celery (kombu) and redis-py accept.
REDIS_SCHEMES = ("redis", "rediss")


def _check_takes_one_argument(function: Any, setting_value: Any, shape: str) -> None:
    """Refuse a callable that cannot be called with one positional argument, or an async one (its
    coroutine would be taken for the result); one whose signature Python cannot read (some
    builtins) is accepted as it is."""
    if function is None:
        return
    named = setting_value if isinstance(setting_value, str) else getattr(function, "__qualname__", repr(function))
    if is_async_consumer(function):
        raise ValueError(f"{named!r} is async; it must be a plain function: {shape}")
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):
        return
    try:
        signature.bind(None)
    except TypeError:
        raise ValueError(f"{named!r} takes {signature}, but it is called as {shape}") from None


class ConfigurationWarning(UserWarning):
    """A setting that is probably not what its author meant (e.g. a misspelled ``LG_*`` variable)."""


def _function_setting(value: Any, setting: str, shape: str) -> Any:
    """A setting that names code: a callable, or a 'module:function' import path imported now."""
    if value is None or callable(value):
        return value
    if isinstance(value, str):
        return import_callable(value, setting)
    raise ValueError(f"{setting} must be {shape}, or 'module:function'; got {value!r}")


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
    models: dict[str, dict[str, Any]] = Field(default_factory=dict, description="model roles: {role: {target, settings}}")
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
        30.0, gt=0, le=3600, allow_inf_nan=False, description="seconds a scheduled step may wait for its message before the outbox relay re-sends it"
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
        return (init_settings, env_settings, YamlFileSource(settings_cls))

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
            raise ValueError(f"nests too deeply: a setting may nest at most {MAX_JSON_DEPTH} levels of mappings and lists")
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
        """Refuse a broker that is not Redis now: Celery, the event streams and the shared rate
        limits all connect to it with Redis clients, so any other URL failed only later, in a
        traceback from start_execution or a Celery worker that `lg worker` restarted forever."""
        if not value:  # None or an emptied LG_BROKER_URL: no broker, runs execute on threads
            return value
        scheme = value.partition("://")[0].lower() if "://" in value else ""
        if scheme not in REDIS_SCHEMES:
            from lg_core.urls import safe_url

            raise ValueError(
                f"{safe_url(value)!r} is not a Redis URL; LittleGhost's broker is Redis: "
                "redis://HOST:6379/0 (or rediss:// for TLS)"
            )
        problem = _redis_url_problem(value)
        if problem:
            from lg_core.urls import safe_url

            raise ValueError(
                f"{safe_url(value)!r} is not a valid Redis URL ({problem}); write it as redis://HOST:6379/0"
            )
        return value

    @field_validator("rate_limits")
    @classmethod
    def _rate_limits(cls, value: dict[str, str]) -> dict[str, str]:
        from lg_core.errors import InvocationError
        from lg_core.rate_limit import RateLimit

        checked = {}
        for connection, limit in value.items():
            if not connection or ":" in connection:
                raise ValueError(f"rate_limits keys are provider connection names like 'openai', got {connection!r}")
            try:
                checked[connection] = str(RateLimit.parse(limit))
            except InvocationError as exc:
                raise ValueError(f"rate_limits[{connection!r}]: {exc}") from None
        return checked

    @field_validator("provider_adapters")
    @classmethod
    def _provider_adapters(cls, value: dict[str, Any]) -> dict[str, Any]:
        """Import and check every adapter now: a typo in a path fails at configuration time, naming
        the adapter, not at the first model call of a run on a worker."""
        return {name: _provider_class(name, adapter) for name, adapter in value.items()}

    @field_validator("run_retention")
    @classmethod
    def _run_retention(cls, value: str | None) -> str | None:
        from lg_core.errors import InvocationError
        from lg_core.retention import parse_age

        if value is None:
            return value
        try:
            parse_age(value)
        except InvocationError:
            raise ValueError(f"run_retention must be an age like 12h, 30d or 2w, got {value!r}") from None
        return value

    @field_validator("session_store", mode="before")
    @classmethod
    def _session_store(cls, value: Any) -> Any:
        from lg_core.sessions import check_declaration

        return check_declaration(value)

    @field_validator("session_actor", mode="before")
    @classmethod
    def _session_actor(cls, value: Any) -> Any:
        """A callable taking the invocation, checked now: one of another shape would fail every run's
        start with a TypeError from inside the engine, far from the setting that caused it."""
        function = _function_setting(value, "session_actor", "a callable (invocation) -> actor id")
        _check_takes_one_argument(function, value, "session_actor(invocation) -> actor id or None")
        return function

    @field_validator("provider_credentials", mode="before")
    @classmethod
    def _provider_credentials(cls, value: Any) -> Any:
        return _function_setting(
            value, "provider_credentials", "a function (provider, adapter, configuration) -> credential options"
        )

    @field_validator("model_resolver", mode="before")
    @classmethod
    def _model_resolver(cls, value: Any) -> Any:
        """A resolver instance now (an import path imported): a class or a typo fails here, not at the first ask."""
        from lg_core.import_path import import_attribute

        if value is None:
            return value
        if isinstance(value, str):
            try:
                value = import_attribute(value)
            except (ValueError, ImportError, AttributeError) as exc:
                raise ValueError(f"{value!r} cannot be imported ({exc}); write it as 'module:attribute'") from None
            except Exception as exc:  # noqa: BLE001 - the module's own code failed: a bad setting, not a crash
                raise ValueError(import_failure(value, exc)) from exc
        if isinstance(value, type) or not callable(getattr(value, "resolve", None)):
            raise ValueError(
                "must be a resolver instance with a resolve(selection, *, invocation=None, ...) method, such as "
                f"ModelResolver(providers=..., profiles=...), got {value!r}"
            )
        return value

    @field_validator("hooks")
    @classmethod
    def _hook_classes(cls, value: list[Any]) -> list[Any]:
        from lg_core.services import Hook

        for hook in value:
            if not (isinstance(hook, type) and issubclass(hook, Hook)):
                raise ValueError(f"hooks must be Hook subclasses, got {hook!r}")
        return value

    def __init__(self, **values: Any) -> None:
        """Build from keyword values, ``lg.yaml`` and ``LG_*``; a bad value is a ConfigurationError naming it."""
        try:
            super().__init__(**values)
        except ValidationError as exc:
            raise ConfigurationError(_describe(exc, values)) from _import_cause(exc)
        except SettingsError as exc:  # an environment variable that should hold JSON does not
            raise ConfigurationError(_describe_settings_error(exc)) from None
        except RecursionError:  # json.loads of an LG_* variable nested too deeply to decode
            raise ConfigurationError(_too_deep_variable(os.environ)) from None
        _warn_of_misspelled_variables(os.environ)

    def __setattr__(self, name: str, value: Any) -> None:
        if not name.startswith("_") and getattr(self, "_runtime", None) is not None:
            raise ConfigurationError(_locked_message(f"set {name}"))
        try:
            super().__setattr__(name, value)
        except ValidationError as exc:  # the value came from the caller, not the environment or a file
            raise ConfigurationError(_describe(exc, {name: value})) from _import_cause(exc)

    def configure(self, **values: Any) -> Configuration:
        """Set several settings and return this configuration (the spec's ``Configuration#configure``;
        ``lg_core.configure(...)`` is this on the active one). An unknown name is refused before any is set."""
        unknown = [name for name in values if name not in type(self).model_fields]
        if unknown:
            raise ConfigurationError(f"unknown setting {unknown[0]!r}{_did_you_mean(unknown[0])}; known settings: {sorted(type(self).model_fields)}")
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

    def runtime(self) -> Any:
        """The shared Runtime for this configuration, built (and the configuration locked) on first use."""
        if self._runtime is None:
            with self._lock:
                if self._runtime is None:
                    from lg_core.services import Runtime

                    self._runtime = Runtime(self)
                    self._set_collections(_locked)
        return self._runtime

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
                self._set_collections(_unlocked)
        if runtime is not None:
            runtime.close()


# The numeric settings and the word pydantic uses for each ("integer", "number"): a bool is refused for them.
_NUMERIC_WORDS: dict[Any, str] = {int: "integer", float: "number"}
_NUMERIC_FIELDS = {
    name: _NUMERIC_WORDS[field.annotation]
    for name, field in Configuration.model_fields.items()
    if field.annotation in (int, float)
}


def _import_cause(exc: ValidationError) -> BaseException | None:
    """What a setting's module raised while it was imported (chained by the validator), so the
    ConfigurationError keeps that traceback for a debugger; None for an ordinary bad value."""
    for error in exc.errors():
        raised = (error.get("ctx") or {}).get("error")
        if isinstance(raised, BaseException) and raised.__cause__ is not None:
            return raised.__cause__
    return None


def _did_you_mean(name: str) -> str:
    """``; did you mean 'default_model'?`` for a near miss of a setting's name, else nothing."""
    close = difflib.get_close_matches(str(name), list(Configuration.model_fields), n=1, cutoff=0.75)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _locked_message(change: str) -> str:
    return (
        f"the configuration is locked because its runtime is running; {change} before the first "
        "agent call, or use with_configuration(Configuration(...)) for an independent setup"
    )


class _LockedDict(dict):  # type: ignore[type-arg]
    """A mapping setting of a locked configuration: reads as a dict, refuses changes."""

    def _refuse(self, *args: Any, **kwargs: Any) -> None:
        raise ConfigurationError(_locked_message("change providers, models and the other mapping settings"))

    __setitem__ = __delitem__ = __ior__ = clear = pop = popitem = setdefault = update = _refuse  # type: ignore[assignment]

    def __reduce__(self) -> Any:  # copies and pickles are ordinary, editable dicts
        return (dict, (_unlocked(self),))

    def __copy__(self) -> dict[Any, Any]:
        return _unlocked(self)

    def __deepcopy__(self, memo: dict[int, Any]) -> dict[Any, Any]:
        import copy

        return copy.deepcopy(_unlocked(self), memo)


class _LockedList(list):  # type: ignore[type-arg]
    """A list setting (imports, hooks) of a locked configuration: reads as a list, refuses changes."""

    def _refuse(self, *args: Any, **kwargs: Any) -> None:
        raise ConfigurationError(_locked_message("change imports and hooks"))

    __setitem__ = __delitem__ = __iadd__ = __imul__ = _refuse  # type: ignore[assignment]
    append = extend = insert = remove = pop = clear = sort = reverse = _refuse  # type: ignore[assignment]

    def __reduce__(self) -> Any:
        return (list, (_unlocked(self),))

    def __copy__(self) -> list[Any]:
        return _unlocked(self)

    def __deepcopy__(self, memo: dict[int, Any]) -> list[Any]:
        import copy

        return copy.deepcopy(_unlocked(self), memo)


def _locked(value: Any) -> Any:
    """``value`` with its dicts and lists, at any depth, made locked copies."""
    if isinstance(value, dict):
        return _LockedDict({key: _locked(item) for key, item in value.items()})
    if isinstance(value, list):
        return _LockedList(_locked(item) for item in value)
    return value


def _unlocked(value: Any) -> Any:
    """``value`` with its dicts and lists, at any depth, made plain editable copies."""
    if isinstance(value, dict):
        return {key: _unlocked(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_unlocked(item) for item in value]
    return value


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


def _redis_url_problem(url: str) -> str | None:
    """What Celery (kombu) and redis-py would choke on in a redis:// URL: they raise only when they
    connect, in a Celery worker that `lg worker` restarts with the same traceback forever."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - parsing the port is the check
    except ValueError as exc:  # "Invalid IPv6 URL", "Port could not be cast to integer value as 'abc'"
        return str(exc)
    database = parts.path.strip("/")
    if database and not database.isdigit():
        return f"the database after the host must be a number, got {database!r}"
    return None


def _provider_class(name: Any, adapter: Any) -> Any:
    """The Provider subclass registered as adapter ``name`` (imported when given as a path)."""
    from lg_core.import_path import import_attribute
    from lg_core.providers import Provider

    if not isinstance(name, str) or not name or ":" in name:
        raise ValueError(f"provider adapter names are non-empty strings without ':', got {name!r}")
    if isinstance(adapter, str):
        try:
            adapter = import_attribute(adapter)
        except (ValueError, ImportError, AttributeError) as exc:
            raise ValueError(f"adapter {name!r}: {adapter!r} cannot be imported ({exc}); write it as 'module:Class'") from None
        except Exception as exc:  # noqa: BLE001 - the module's own code failed: a bad setting, not a crash
            raise ValueError(f"adapter {name!r}: {import_failure(adapter, exc)}") from exc
    if not (isinstance(adapter, type) and issubclass(adapter, Provider)):
        raise ValueError(f"adapter {name!r} must be a lg_core.providers.Provider subclass, got {adapter!r}")
    return adapter


CONFIG_FILE_NAME = "lg.yaml"
CONFIG_FILE_ENV = "LG_CONFIG"


def config_file_path() -> Path | None:
    """The YAML config file in force: ``$LG_CONFIG`` (which must exist), else ./lg.yaml if present."""
    named = os.environ.get(CONFIG_FILE_ENV)
    if named:
        path = Path(named).expanduser()
        if not path.is_file():
            raise ConfigurationError(
                f"{CONFIG_FILE_ENV}={named} names no readable file; point it at your lg.yaml or unset it"
            )
        return path
    path = Path.cwd() / CONFIG_FILE_NAME
    return path if path.is_file() else None


class YamlFileSource(YamlConfigSettingsSource):
    """The YAML config file as a settings source; a broken file is a ConfigurationError naming the key."""

    def __init__(self, settings_cls: type[BaseSettings]) -> None:
        self.path = config_file_path()
        super().__init__(settings_cls, yaml_file=self.path)

    def _read_file(self, file_path: Any) -> dict[str, Any]:
        import yaml

        try:
            data = super()._read_file(file_path)
        except RecursionError:
            raise ConfigurationError(
                f"config file {file_path} nests too deeply to read: a setting may nest at most {MAX_JSON_DEPTH} "
                "levels of mappings and lists"
            ) from None
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
            problem = getattr(exc, "problem", None) or exc
            raise ConfigurationError(f"config file {file_path} is not valid YAML{where}: {problem}") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigurationError(f"cannot read config file {file_path}: {exc}") from None
        if not isinstance(data, dict):
            raise ConfigurationError(
                f"config file {file_path} must be a mapping of settings (run_store: ..., broker_url: ...), "
                f"got {type(data).__name__}"
            )
        unknown = sorted(str(key) for key in data if key not in Configuration.model_fields)
        if unknown:
            raise ConfigurationError(
                f"unknown setting {unknown[0]!r} in config file {file_path}{_did_you_mean(unknown[0])}; known settings: "
                f"{', '.join(sorted(Configuration.model_fields))}"
            )
        return data


def build_configuration(**values: Any) -> Configuration:
    """A Configuration from keyword values, with ConfigurationError for bad ones."""
    return Configuration(**values)


def _describe_settings_error(exc: SettingsError) -> str:
    found = re.search(r'field "([a-z_]+)"', str(exc))
    if found is None:
        return f"invalid configuration: {exc}"
    name = found.group(1)
    return (
        f"invalid configuration: {name} (from ${ENV_PREFIX}{name.upper()}): not valid JSON; "
        + (f"e.g. {ENV_PREFIX}{name.upper()}='{_JSON_EXAMPLES[name]}'" if name in _JSON_EXAMPLES else "give it as JSON")
    )


_default: Configuration | None = None
_default_lock = threading.Lock()
_current: contextvars.ContextVar[Configuration | None] = contextvars.ContextVar("lg_configuration", default=None)


def configuration() -> Configuration:
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
    return configuration().configure(**values)


@contextmanager
def with_configuration(config: Configuration) -> Iterator[Configuration]:
    """Make ``config`` (and its own runtime) current for this block."""
    token = _current.set(config)
    try:
        yield config
    finally:
        _current.reset(token)


def runtime() -> Any:
    return configuration().runtime()


def model_resolver() -> Any:
    """The active configuration's ModelResolver (the spec's ``LittleGhost.model_resolver``):
    ``model_resolver().resolve("customer_support")``. It belongs to the shared Runtime, so
    this builds the runtime (and locks the configuration) as the first agent call would."""
    return runtime().model_resolver


def _describe(exc: ValidationError, values: dict[str, Any] | None = None) -> str:
    parts = []
    for error in exc.errors():
        loc = error.get("loc", ())
        where = ".".join(str(p) for p in loc)
        origin = _origin(str(loc[0]), values or {}) if loc else ""
        message = str(error.get("msg", "")).removeprefix("Value error, ")  # our validators' own words
        parts.append(f"{where}{origin}: {message}")
    return "invalid configuration: " + "; ".join(parts)


def _too_deep_variable(environ: Mapping[str, str]) -> str:
    """The message for a JSON-valued ``LG_*`` variable nested too deeply to decode, naming it."""
    for name, text in environ.items():
        if name.startswith(ENV_PREFIX):
            try:
                json.loads(text)
            except RecursionError:
                return (f"invalid configuration: ${name} nests too deeply to decode: a setting may nest at most "
                        f"{MAX_JSON_DEPTH} levels of mappings and lists")
            except ValueError:
                continue
    return f"invalid configuration: a setting may nest at most {MAX_JSON_DEPTH} levels of mappings and lists"


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


def _origin(key: str, values: dict[str, Any]) -> str:
    """Where a bad value came from, so the message says which file or variable to fix."""
    if key in values:
        return ""
    env = f"LG_{key.upper()}"
    if os.environ.get(env):  # an empty one is ignored (env_ignore_empty)
        return f" (from ${env})"
    try:
        path = config_file_path()
    except ConfigurationError:
        return ""
    return f" (in config file {path})" if path is not None else ""


__all__ = ["CONFIG_FILE_ENV", "CONFIG_FILE_NAME", "Configuration", "ConfigurationWarning", "build_configuration", "config_file_path", "configuration", "configure", "model_resolver", "runtime", "with_configuration"]
