"""Checks of the settings that name code or a server, run when a value is set.

Each turns a value that would fail much later (at the first model call of a run on a
worker, or in a Celery worker that ``lg worker`` restarts forever) into a ValueError
now, which the configuration reports naming the setting and where its value came from.
"""

from __future__ import annotations

import inspect
from typing import Any

from lg_core.events import is_async_consumer
from lg_core.hooks import Hook
from lg_core.import_path import import_callable, import_failure
from lg_core.run_selection import parse_age

# The broker URL schemes that both Celery (kombu) and redis-py accept.
REDIS_SCHEMES = ("redis", "rediss")


def check_takes_one_argument(function: Any, setting_value: Any, shape: str) -> None:
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


def function_setting(value: Any, setting: str, shape: str) -> Any:
    """A setting that names code: a callable, or a 'module:function' import path imported now."""
    if value is None or callable(value):
        return value
    if isinstance(value, str):
        return import_callable(value, setting)
    raise ValueError(f"{setting} must be {shape}, or 'module:function'; got {value!r}")


def redis_url_problem(url: str) -> str | None:
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


def provider_class(name: Any, adapter: Any) -> Any:
    """The Provider subclass registered as adapter ``name`` (imported when given as a path)."""
    from lg_core.import_path import import_attribute
    from lg_core.providers import Provider

    if not isinstance(name, str) or not name or ":" in name:
        raise ValueError(f"provider adapter names are non-empty strings without ':', got {name!r}")
    if isinstance(adapter, str):
        try:
            adapter = import_attribute(adapter)
        except (ValueError, ImportError, AttributeError) as exc:
            raise ValueError(
                f"adapter {name!r}: {adapter!r} cannot be imported ({exc}); write it as 'module:Class'"
            ) from None
        except Exception as exc:  # noqa: BLE001 - the module's own code failed: a bad setting, not a crash
            raise ValueError(f"adapter {name!r}: {import_failure(adapter, exc)}") from exc
    if not (isinstance(adapter, type) and issubclass(adapter, Provider)):
        raise ValueError(f"adapter {name!r} must be a lg_core.providers.Provider subclass, got {adapter!r}")
    return adapter


def checked_broker_url(value: str | None) -> str | None:
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
    problem = redis_url_problem(value)
    if problem:
        from lg_core.urls import safe_url

        raise ValueError(f"{safe_url(value)!r} is not a valid Redis URL ({problem}); write it as redis://HOST:6379/0")
    return value


def checked_rate_limits(value: dict[str, str]) -> dict[str, str]:
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


def checked_run_retention(value: str | None) -> str | None:
    from lg_core.errors import InvocationError

    if value is None:
        return value
    try:
        parse_age(value)
    except InvocationError:
        raise ValueError(f"run_retention must be an age like 12h, 30d or 2w, got {value!r}") from None
    return value


def checked_session_actor(value: Any) -> Any:
    """A callable taking the invocation, checked now: one of another shape would fail every run's
    start with a TypeError from inside the engine, far from the setting that caused it."""
    function = function_setting(value, "session_actor", "a callable (invocation) -> actor id")
    check_takes_one_argument(function, value, "session_actor(invocation) -> actor id or None")
    return function


def checked_model_resolver(value: Any) -> Any:
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


def checked_hooks(value: list[Any]) -> list[Any]:
    for hook in value:
        if not (isinstance(hook, type) and issubclass(hook, Hook)):
            raise ValueError(f"hooks must be Hook subclasses, got {hook!r}")
    return value


__all__ = [
    "REDIS_SCHEMES",
    "check_takes_one_argument",
    "checked_broker_url",
    "checked_hooks",
    "checked_model_resolver",
    "checked_rate_limits",
    "checked_run_retention",
    "checked_session_actor",
    "function_setting",
    "provider_class",
    "redis_url_problem",
]
