"""ExecutionState: request-scoped values that follow a run to wherever its steps execute.

The spec's ``LittleGhost::ExecutionState``. A web request sets its request id
or tenant once; every run started from that request sees them in its tools,
callbacks and hooks, on whichever thread executes the step, and on whichever
worker process when the run is distributed. A run started from another request
never sees them::

    from lg_core import ExecutionState

    ExecutionState["request_id"] = request.headers["X-Request-Id"]
    with ExecutionState.with_({"tenant": "acme"}):
        SupportAgent.start_execution("Where is order 481?")

    class LedgerTool(Tool):
        def call(self, input):
            log.info("lookup", extra={"request_id": ExecutionState["request_id"]})

Python threads do not inherit context variables and workers are other
processes, so the state cannot simply be inherited: a Run captures the state
of the code that builds it (``capture()``, an immutable mapping whose values
are not copied), and the engine makes that captured state current around each
step it executes, then restores what was there. A step that changes the state
changes it for itself only. As in the spec, other context variables and
thread-locals of the application are not carried.

The captured state is stored with the run, so a run resumed or retried in
another process sees it too. A distributed run's state must be
JSON-compatible (InvocationError before the run exists, otherwise); a local
run keeps any value while it executes here and stores the JSON-compatible ones.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from types import MappingProxyType
from typing import Any

from lg_core.datamap import to_json_value
from lg_core.errors import InvocationError

EMPTY: Mapping[str, Any] = MappingProxyType({})
_current: ContextVar[Mapping[str, Any]] = ContextVar("lg_execution_state", default=EMPTY)


def _key(key: Any) -> str:
    if not isinstance(key, str) or not key:
        raise TypeError(f"ExecutionState keys are non-empty strings, not {key!r}")
    return key


class _ExecutionState:
    """The current execution state: ``ExecutionState[key]``, ``ExecutionState[key] = value``,
    ``capture()``, ``delete(key)`` and ``with_(values)``, as the spec's class methods."""

    def __getitem__(self, key: str) -> Any:
        """The value of ``key`` in the current state, None when it has none (as the spec's ``[]``)."""
        return _current.get().get(_key(key))

    def get(self, key: str, default: Any = None) -> Any:
        return _current.get().get(_key(key), default)

    def __setitem__(self, key: str, value: Any) -> None:
        """Replace ``key`` in the current context's state (the captured mappings stay as they were)."""
        _current.set(MappingProxyType({**_current.get(), _key(key): value}))

    def __contains__(self, key: object) -> bool:
        return key in _current.get()

    def delete(self, key: str) -> Any:
        """Remove ``key``; returns its previous value (None when it had none)."""
        state = dict(_current.get())
        previous = state.pop(_key(key), None)
        _current.set(MappingProxyType(state))
        return previous

    def capture(self) -> Mapping[str, Any]:
        """The current state as an immutable mapping, to hand to code that runs elsewhere."""
        return _current.get()

    @contextmanager
    def with_(self, values: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
        """Merge ``values`` into the state while the block runs, then restore the state before it."""
        if not isinstance(values, Mapping):
            raise TypeError(f"ExecutionState.with_ takes a mapping of values, not {type(values).__name__}")
        merged = {**_current.get(), **{_key(k): v for k, v in values.items()}}
        token = _current.set(MappingProxyType(merged))
        try:
            yield _current.get()
        finally:
            _current.reset(token)

    def __repr__(self) -> str:
        return f"ExecutionState({dict(_current.get())!r})"


ExecutionState = _ExecutionState()


@contextmanager
def applied(captured: Mapping[str, Any]) -> Iterator[None]:
    """Make a run's captured state current while one of its steps executes (the engine's use)."""
    token = _current.set(captured)
    try:
        yield
    finally:
        _current.reset(token)


def stored_form(captured: Mapping[str, Any], *, distributed: bool) -> dict[str, Any] | None:
    """The state as the run store keeps it (JSON), None when empty.

    A distributed run needs every value (its steps execute in other processes):
    a value JSON cannot hold is an InvocationError naming it. A local run keeps
    its values in memory and stores those JSON can hold, for a resume elsewhere.
    """
    stored = {}
    for key, value in captured.items():
        try:
            stored[key] = to_json_value(value, path=f"ExecutionState[{key!r}]")
        except (TypeError, ValueError) as exc:
            if distributed:
                raise InvocationError(
                    f"{exc}: a run executed by workers carries its ExecutionState to them as JSON; "
                    "put an id or a string there instead"
                ) from None
    return stored or None


def restored(stored: Mapping[str, Any] | None) -> Mapping[str, Any]:
    """The captured state of a run loaded from the store."""
    return MappingProxyType(dict(stored)) if stored else EMPTY


__all__ = ["EMPTY", "ExecutionState", "applied", "restored", "stored_form"]
