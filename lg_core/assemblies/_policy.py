"""The execution policy a Workflow call, Swarm member or Graph node declares, checked when declared.

Timeouts and retries repeat or stop a whole child step, so a bad value must fail where it is
written, naming the declaration, not in the middle of a run. Retries are opt-in per failure:
``retries`` above zero needs ``retry_on`` listing the exception classes that are safe to try
again, because LittleGhost never retries every failure by default.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from lg_core.errors import ConfigurationError


@dataclass(frozen=True, slots=True)
class StepPolicy:
    """How one child step is attempted: its timeout (seconds), retries, what they retry on, and the delay."""

    timeout: float | None = None
    retries: int = 0
    retry_on: tuple[type[BaseException], ...] = ()
    retry_delay: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        """The stored form; exception classes by their ``module:QualName``."""
        return {
            "timeout": self.timeout,
            "retries": self.retries,
            "retry_on": [f"{cls.__module__}:{cls.__qualname__}" for cls in self.retry_on],
            "retry_delay": self.retry_delay,
        }


DEFAULT_POLICY = StepPolicy()


def checked_policy(
    owner: str,
    *,
    timeout: Any = None,
    retries: Any = 0,
    retry_on: Any = None,
    retry_delay: Any = 0,
) -> StepPolicy:
    """A StepPolicy from declared values; ConfigurationError naming ``owner`` for a bad one."""
    if timeout is not None and not _positive_number(timeout):
        raise ConfigurationError(f"{owner}: timeout must be a positive number of seconds or None, got {timeout!r}")
    if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
        raise ConfigurationError(f"{owner}: retries must be an integer of 0 or more, got {retries!r}")
    if isinstance(retry_delay, bool) or not isinstance(retry_delay, (int, float)) or retry_delay < 0:
        raise ConfigurationError(f"{owner}: retry_delay must be 0 or more seconds, got {retry_delay!r}")
    classes = exception_classes(retry_on, f"{owner}: retry_on") if retry_on is not None else ()
    if retries > 0 and not classes:
        raise ConfigurationError(
            f"{owner}: retries={retries} needs retry_on, the exception classes that are safe to try again "
            "(LittleGhost retries only the failures you list)"
        )
    if classes and retries == 0:
        raise ConfigurationError(f"{owner}: retry_on is given but retries is 0, so nothing would be retried")
    return StepPolicy(
        timeout=None if timeout is None else float(timeout),
        retries=retries,
        retry_on=classes,
        retry_delay=float(retry_delay),
    )


def exception_classes(declared: Any, owner: str) -> tuple[type[BaseException], ...]:
    """``declared`` (one exception class or a list of them) as a non-empty tuple of classes."""
    items: Sequence[Any] = (declared,) if isinstance(declared, type) else declared
    if isinstance(items, (str, bytes)) or not isinstance(items, Sequence) or not items:
        raise ConfigurationError(f"{owner} must be an exception class or a non-empty list of them, got {declared!r}")
    for item in items:
        if not (isinstance(item, type) and issubclass(item, BaseException)):
            raise ConfigurationError(f"{owner} must list exception classes, got {item!r}")
    return tuple(items)


def checked_flag(value: Any, owner: str) -> bool:
    """A ``history=`` or ``context=`` opt-in: True or False, nothing that merely looks truthy."""
    if not isinstance(value, bool):
        raise ConfigurationError(f"{owner} must be True or False, got {value!r}")
    return value


def checked_limit(value: Any, owner: str) -> int:
    """A positive integer bound (``max_steps``, ``max_concurrency`` ...)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigurationError(f"{owner} must be a positive integer, got {value!r}")
    return value


def checked_optional_limit(value: Any, owner: str) -> int | None:
    """A positive integer bound, or None for none (``max_handoff_repeats``, a fan-out's own bound)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigurationError(f"{owner} must be a positive integer or None, got {value!r}")
    return value


def _positive_number(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, (int, float)) and value > 0


__all__ = [
    "DEFAULT_POLICY",
    "StepPolicy",
    "checked_flag",
    "checked_limit",
    "checked_optional_limit",
    "checked_policy",
    "exception_classes",
]
