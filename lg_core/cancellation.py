"""CancellationToken: cooperative stop signal for a run's tree of work.

Cancellation is idempotent and flows only downward, from a token to the
children created from it. Long-running code calls :meth:`raise_if_cancelled`
at bounded intervals.
"""

from __future__ import annotations

import contextlib
import threading
import weakref
from collections.abc import Callable

from lg_core.errors import CancelledError


class CancellationToken:
    """A thread-safe flag that cancels itself and every attached child."""

    def __init__(self, parent: CancellationToken | None = None) -> None:
        self._event = threading.Event()
        self._lock = threading.Lock()
        self._children: weakref.WeakSet[CancellationToken] = weakref.WeakSet()
        self._callbacks: list[Callable[[], None]] = []
        self.reason: str | None = None
        if parent is not None:
            parent._attach(self)

    def _attach(self, child: CancellationToken) -> None:
        with self._lock:
            self._children.add(child)
            cancelled = self._event.is_set()
        if cancelled:
            child.cancel(self.reason)

    def cancel(self, reason: str | None = None) -> None:
        """Cancel this token and all currently attached children."""
        with self._lock:
            if self._event.is_set():
                return
            self.reason = reason
            self._event.set()
            children = list(self._children)
            callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            with contextlib.suppress(Exception):  # a failing callback must not keep cancellation from the children
                callback()
        for child in children:
            child.cancel(reason)

    def on_cancel(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Call ``callback`` once when this token is cancelled (now, if it already is); returns a remover.

        For work blocked where it cannot poll, such as a socket read waiting for a
        model's next chunk: the callback unblocks it (a provider shuts the socket).
        """
        with self._lock:
            if not self._event.is_set():
                self._callbacks.append(callback)
                return lambda: self._forget(callback)
        callback()
        return lambda: None

    def _forget(self, callback: Callable[[], None]) -> None:
        with self._lock, contextlib.suppress(ValueError):
            self._callbacks.remove(callback)

    @property
    def cancelled(self) -> bool:
        return self._event.is_set()

    def child(self) -> CancellationToken:
        """A token cancelled automatically with this one."""
        return CancellationToken(parent=self)

    def raise_if_cancelled(self) -> None:
        """Raise CancelledError when cancellation has been requested."""
        if self._event.is_set():
            raise CancelledError(self.reason or "The run was cancelled.")

    def wait(self, timeout: float | None) -> bool:
        """Wait up to ``timeout`` seconds for cancellation; True if cancelled."""
        return self._event.wait(timeout)


def token_or_new(token: object) -> CancellationToken:
    """``token``, or a new token for None; TypeError for anything else.

    A wrong value (a string, a flag) would otherwise be kept and fail at the first
    check, with an AttributeError far from the call that passed it.
    """
    if token is None:
        return CancellationToken()
    if not isinstance(token, CancellationToken):
        raise TypeError(f"cancellation_token must be a CancellationToken, got {type(token).__name__}")
    return token


__all__ = ["CancellationToken", "token_or_new"]
