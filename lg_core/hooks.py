"""Hook: the application's callbacks around runs, one instance per Runtime.

Configured as ``configure(hooks=[MyHook])``; every method has a do-nothing
default, so a hook overrides only what it needs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from lg_core.run import Run


class Hook:
    """Application hooks, instantiated once per Runtime; override what you need."""

    def prepare_run(self, run: Run) -> Run:
        """A newly built Run; register run-scoped resources here.

        Also called in each process that continues a stored run (a worker
        executing its steps, ``resume``, ``retry``), since resources do not
        travel with the run; there they close when that process is done with it.
        """
        return run

    def prepare_execution(self, run: Run) -> Run:
        """Called right before the run starts executing."""
        return run

    def prepare_interjection(self, run: Run, payload: Any) -> Any:
        return payload

    def session_history(self, run: Run, stored: Any, fallback: Any) -> Any:
        return None

    def error_message(self, error: BaseException, run: Run) -> str | None:
        """A caller-safe message for ``error``, or None to defer to later hooks and the default (the
        error's class and a fixed sentence). Asked for the error that ends a run and for the error of
        each retried model call; the message is what their events tell every stream consumer."""
        return None


__all__ = ["Hook"]
