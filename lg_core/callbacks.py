"""Agent callbacks: decorated methods that observe, replace or cancel work.

A callback returns :func:`replace` (its value becomes the payload for later
callbacks), :func:`cancel` (stops the chain), or anything else (continue).
Callbacks declared on a parent class run before the subclass's, unless a
callback is declared with ``prepend=True``. A callback may be ``async def``:
like an async tool's ``call``, it is run to completion on the step's thread
(:func:`awaited`).

    class SupportAgent(Agent):
        @before_model
        def add_hint(self, payload, context):
            return replace({**payload, "request": payload["request"].with_settings(top_p=0.9)})
"""

from __future__ import annotations

import asyncio
import inspect
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from lg_core.errors import ConfigurationError
from lg_core.models.request import ModelRequest, ModelResponse
from lg_core.run_result import RunResult

CALLBACK_NAMES = (
    "after_initialize",
    "before_invocation",
    "after_invocation",
    "before_model",
    "after_model",
    "after_model_error",
    "before_tool",
    "after_tool",
)
# The payload key a replacement must keep, per callback.
REQUIRED_KEYS = {
    "before_invocation": "messages",
    "after_invocation": "result",
    "before_model": "request",
    "after_model": "response",
    "after_model_error": "request",
    "after_tool": "result",
}
# The type the engine reads from that key, per callback. A replacement holding
# anything else would only fail later, deep in the engine, with an AttributeError
# that names neither the callback nor what it should have returned.
REQUIRED_TYPES: dict[str, type] = {
    "after_invocation": RunResult,
    "before_model": ModelRequest,
    "after_model": ModelResponse,
    "after_model_error": ModelRequest,
}
_MARK = "_lg_callback"


@dataclass(frozen=True, slots=True)
class Decision:
    """What a callback chain decided: continue, cancel (with reason) or replace (with value)."""

    kind: str
    value: Any = None
    reason: str | None = None

    @property
    def continue_(self) -> bool:
        return self.kind == "continue"

    @property
    def cancelled(self) -> bool:
        return self.kind == "cancel"

    @property
    def replaced(self) -> bool:
        return self.kind == "replace"


CONTINUE = Decision("continue")


def replace(value: Any) -> Decision:
    """Give later callbacks (and the framework) ``value`` instead of the payload."""
    return Decision("replace", value=value)


def cancel(reason: str | None = None) -> Decision:
    """Stop the chain; what cancellation means depends on the callback."""
    return Decision("cancel", reason=reason)


def _decorator(name: str) -> Callable[..., Any]:
    def decorate(function: Callable[..., Any] | None = None, *, prepend: bool = False) -> Any:
        def mark(fn: Callable[..., Any]) -> Callable[..., Any]:
            if not callable(fn):
                raise TypeError(f"@{name} decorates a method, got {fn!r}")
            setattr(fn, _MARK, (name, prepend))
            return fn

        return mark(function) if function is not None else mark

    decorate.__name__ = name
    decorate.__doc__ = f"Declare an agent method as a ``{name}`` callback."
    return decorate


after_initialize = _decorator("after_initialize")
before_invocation = _decorator("before_invocation")
after_invocation = _decorator("after_invocation")
before_model = _decorator("before_model")
after_model = _decorator("after_model")
after_model_error = _decorator("after_model_error")
before_tool = _decorator("before_tool")
after_tool = _decorator("after_tool")


def collect(cls: type, inherited: Mapping[str, tuple[str, ...]]) -> dict[str, tuple[str, ...]]:
    """Merge ``cls``'s decorated methods into the inherited chains (by method name)."""
    chains = {name: list(inherited.get(name, ())) for name in CALLBACK_NAMES}
    for attr, value in vars(cls).items():
        mark = getattr(value, _MARK, None)
        if mark is None:
            continue
        name, prepend = mark
        chain = chains[name]
        if attr in chain:
            chain.remove(attr)
        chain.insert(0, attr) if prepend else chain.append(attr)
    return {name: tuple(chain) for name, chain in chains.items()}


# Whether a callback function takes ``context``, by function: run_chain asks for
# every callback call (several per step), and inspect.signature costs microseconds.
_TAKES_CONTEXT: weakref.WeakKeyDictionary[Any, bool] = weakref.WeakKeyDictionary()


def _accepts_context(fn: Callable[..., Any]) -> bool:
    """Does ``fn`` take a ``context`` keyword? Cached per underlying function."""
    key = getattr(fn, "__func__", fn)  # a bound method: its function, shared by every instance
    try:
        return _TAKES_CONTEXT[key]
    except (KeyError, TypeError):  # not seen yet, or not weak-referenceable / hashable
        pass
    accepts = _signature_accepts_context(fn)
    try:
        _TAKES_CONTEXT[key] = accepts
    except TypeError:
        pass
    return accepts


def _signature_accepts_context(fn: Callable[..., Any]) -> bool:
    try:
        parameters = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    return "context" in parameters or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())


def run_chain(receiver: Any, name: str, payload: Any, *, context: Any = None) -> Decision:
    """Run ``receiver``'s ``name`` chain; the result's value is the final payload."""
    methods = type(receiver).callback_chains().get(name, ())
    if not methods:
        return Decision("continue", value=payload)
    current, replaced = payload, False
    for attr in methods:
        fn = getattr(receiver, attr)
        result = fn(current, context=context) if _accepts_context(fn) else fn(current)
        result = awaited(result, f"{type(receiver).__qualname__}.{attr} ({name} callback)")
        if isinstance(result, Decision) and result.cancelled:
            return result
        if isinstance(result, Decision) and result.replaced:
            _check_replacement(name, attr, result.value)
            current, replaced = result.value, True
    return Decision("replace" if replaced else "continue", value=current)


def awaited(result: Any, what: str) -> Any:
    """``result``, or, when it is awaitable (an ``async def`` callback, predicate or prompt), its value.

    Left unawaited, a coroutine is truthy and is not a Decision: an async guard that
    returned ``cancel(...)`` let the work go on, an async ``available_if`` offered the
    tool, and the prompt sent was the coroutine's repr. Like an async tool's ``call``,
    it runs to completion with ``asyncio.run`` on the step's thread. That is impossible
    while an event loop runs on this thread (``ask`` called from a coroutine), and
    skipping the guard would be worse, so that case is a ConfigurationError.
    ``what`` names the callable for that error.
    """
    if not inspect.isawaitable(result):
        return result
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(_value_of(result))
    if inspect.iscoroutine(result):
        result.close()  # never run: no "was never awaited" warning on top of the error
    raise ConfigurationError(
        f"{what} is async, but an event loop is already running in this thread, so LittleGhost "
        "cannot run it to completion here; start the run off the loop (await ask_async(...)) "
        "or make it a plain `def`"
    )


async def _value_of(awaitable: Any) -> Any:
    """A coroutine for ``asyncio.run``, which takes nothing else (a Future, an object with ``__await__``)."""
    return await awaitable


def _article(word: str) -> str:
    """The indefinite article for ``word``: "an after_model ...", "a before_model ..."."""
    return "an" if word[:1].lower() in ("a", "e", "i", "o", "u") else "a"


def _check_replacement(name: str, attr: str, value: Any) -> None:
    """Fail at the callback that returned a bad replacement, naming it and what was expected.

    The key must be present and, where the engine reads a typed value from it
    (``REQUIRED_TYPES``), hold that type; otherwise the mistake would surface later
    as an unrelated error far from the callback that made it.
    """
    required = REQUIRED_KEYS.get(name)
    if required is None:
        return
    if not isinstance(value, Mapping) or required not in value:
        raise ConfigurationError(
            f"{name} callback {attr!r} returned replace(...) without {required!r}; "
            f"{_article(name)} {name} replacement must be a dict containing {required!r}"
        )
    expected = REQUIRED_TYPES.get(name)
    given = value[required]
    if expected is not None and not isinstance(given, expected):
        raise ConfigurationError(
            f"{name} callback {attr!r} returned replace(...) with {required!r} of type "
            f"{type(given).__name__}; {_article(name)} {name} replacement's {required!r} must be "
            f"{_article(expected.__name__)} {expected.__name__}"
        )


__all__ = [
    "CALLBACK_NAMES",
    "Decision",
    "after_initialize",
    "after_invocation",
    "after_model",
    "after_model_error",
    "after_tool",
    "before_invocation",
    "before_model",
    "before_tool",
    "cancel",
    "replace",
    "run_chain",
]
