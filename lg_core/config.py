"""Configuration: one settings object read by every process.

Values come from ``configure(...)`` (highest), then environment variables
(``LG_RUN_STORE``, ``LG_BROKER_URL``, ``LG_IMPORTS`` ...), then defaults. The
shared Runtime is built from the configuration on first use and the
configuration is locked from then on, so every request sees one stable setup;
``with_configuration`` selects an independent configuration (and Runtime) for
one block, which is also how tests isolate themselves.
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated, Any

from pydantic import Field, PrivateAttr, ValidationError, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from lg_core.errors import ConfigurationError


class Configuration(BaseSettings):
    """Every LittleGhost setting, with its environment variable ``LG_<NAME>``."""

    model_config = SettingsConfigDict(env_prefix="LG_", extra="forbid", validate_assignment=True)

    run_store: str = Field("sqlite://", description="SQLAlchemy URL of the run store; in-memory SQLite by default")
    broker_url: str | None = Field(None, description="Celery broker URL (Redis) for distributed runs")
    imports: Annotated[list[str], NoDecode] = Field(default_factory=list, description="modules workers import")
    providers: dict[str, dict[str, Any]] = Field(default_factory=dict, description="provider connections by name")
    models: dict[str, dict[str, Any]] = Field(default_factory=dict, description="model roles: {role: {target, settings}}")
    default_model: str | None = None
    hooks: list[Any] = Field(default_factory=list, description="Runtime Hook classes")
    lease_seconds: float = Field(15.0, gt=0, le=3600)
    sqlite_synchronous: str = Field("FULL", description="SQLite synchronous pragma for file stores")
    max_parallel_tools: int = Field(8, ge=1, le=256)
    service_name: str = "littleghost"

    _runtime: Any = PrivateAttr(default=None)
    _lock: Any = PrivateAttr(default_factory=threading.Lock)

    @field_validator("imports", mode="before")
    @classmethod
    def _split_imports(cls, value: Any) -> Any:
        if isinstance(value, str):
            return [part.strip() for part in value.split(",") if part.strip()]
        return value

    @field_validator("hooks")
    @classmethod
    def _hook_classes(cls, value: list[Any]) -> list[Any]:
        from lg_core.services import Hook

        for hook in value:
            if not (isinstance(hook, type) and issubclass(hook, Hook)):
                raise ValueError(f"hooks must be Hook subclasses, got {hook!r}")
        return value

    def __setattr__(self, name: str, value: Any) -> None:
        if not name.startswith("_") and getattr(self, "_runtime", None) is not None:
            raise ConfigurationError(
                f"the configuration is locked because its runtime is running; set {name} before the first "
                "agent call, or use with_configuration(Configuration(...)) for an independent setup"
            )
        super().__setattr__(name, value)

    def runtime(self) -> Any:
        """The shared Runtime for this configuration, built (and the configuration locked) on first use."""
        if self._runtime is None:
            with self._lock:
                if self._runtime is None:
                    from lg_core.services import Runtime

                    self._runtime = Runtime(self)
        return self._runtime

    def close(self) -> None:
        """Shut the runtime down (tests and short-lived tools); the configuration becomes editable."""
        with self._lock:
            runtime, self._runtime = self._runtime, None
        if runtime is not None:
            runtime.close()


def build_configuration(**values: Any) -> Configuration:
    """A Configuration from keyword values, with ConfigurationError for bad ones."""
    try:
        return Configuration(**values)
    except ValidationError as exc:
        raise ConfigurationError(_describe(exc)) from None


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
    config = configuration()
    for name, value in values.items():
        if name not in Configuration.model_fields:
            raise ConfigurationError(f"unknown setting {name!r}; known settings: {sorted(Configuration.model_fields)}")
        try:
            setattr(config, name, value)
        except ValidationError as exc:
            raise ConfigurationError(_describe(exc)) from None
    return config


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


def _describe(exc: ValidationError) -> str:
    parts = []
    for error in exc.errors():
        where = ".".join(str(p) for p in error.get("loc", ()))
        parts.append(f"{where}: {error.get('msg')}")
    return "invalid configuration: " + "; ".join(parts)


__all__ = ["Configuration", "build_configuration", "configuration", "configure", "runtime", "with_configuration"]
