"""What the engine needs of a run and of the runtime it belongs to, as protocols.

The engine executes the steps of ``lg_core.run.Run`` objects built by an
``lg_core.runtime.Runtime``, but does not import either module: those
import the engine, and the engine reaching back for them would tie the public
API and the engine into one import cycle. These protocols name the few
members the engine uses; ``Run`` and ``Runtime`` satisfy them as they are.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

if TYPE_CHECKING:
    from lg_core.cancellation import CancellationToken
    from lg_core.invocation import Invocation
    from lg_core.messages import Message
    from lg_core.sandbox.run_resources import RunResources
    from lg_core.sessions.base import SessionStore
    from lg_core.sessions.run_sessions import Opening
    from lg_core.store import RunRecord
    from lg_core.store.records import SessionWrite


class EngineRun(Protocol):
    """A run as the engine executes it: identity, invocation, agent class and cancellation."""

    @property
    def id(self) -> str: ...

    @property
    def invocation(self) -> Invocation: ...

    @property
    def entrypoint_class(self) -> Any: ...

    @property
    def entrypoint_path(self) -> str: ...

    @property
    def cancellation_token(self) -> CancellationToken: ...

    @property
    def runtime(self) -> Any: ...

    @property
    def include_agent_events(self) -> bool: ...  # its caller wants its participants' agent_stream wrappers

    session_actor_id: str | None
    execution_state: Mapping[str, Any]
    parent_step: tuple[str, str] | None  # the step whose child this run is, woken by its ending
    parent_waits_inline: bool  # that step executes this run on its own thread and never parks on it
    _model: Any  # the run's resolved model, resolved once (Engine.resolve_model)
    _ended_here: bool  # a commit in this process ended the run: its queued local steps never start
    _created_at: float | None  # the run row's created_at, when this process created it
    _finished_at: float | None  # the run row's finished_at, when a commit in this process ended it

    def close(self) -> None: ...

    def record_diagnostic(self, entry: dict[str, Any], error: BaseException | None = None) -> None: ...

    def refresh(self) -> Any: ...


RunT = TypeVar("RunT", bound=EngineRun)
RunT_co = TypeVar("RunT_co", bound=EngineRun, covariant=True)


class EngineRuntime(Protocol[RunT_co]):
    """The services one configuration shares, as far as the engine uses them."""

    @property
    def hooks(self) -> Sequence[Any]: ...

    @property
    def resolver(self) -> Any: ...

    @property
    def rate_limits(self) -> Mapping[str, Any]: ...

    @property
    def rate_limiter(self) -> Any: ...

    @property
    def backend(self) -> Any: ...

    def restored_run(self, record: RunRecord) -> RunT_co: ...

    def run_resources(self, run_id: str, invocation: Invocation | None = None) -> RunResources:
        """The unopened workspace and sandbox the settings declare for one step of ``run_id``."""
        ...

    def run_to_end(self, record: RunRecord) -> RunT_co:
        """The run rebuilt from its record alone (no agent class, no hooks): enough to end it."""


class EngineSessions(Protocol):
    """How runs load and save their sessions (``lg_core.sessions.run_sessions.RunSessions``), as the engine calls it.

    Its methods take the run the engine holds: an ``EngineRun`` here, a ``Run`` in
    the implementation, which is the same object.
    """

    @property
    def store(self) -> SessionStore | None: ...

    @property
    def enabled(self) -> bool: ...

    @property
    def in_store(self) -> bool: ...

    def actor_for(self, invocation: Invocation) -> str | None: ...

    def open(self, run: Any, hooks: Sequence[Any] = ()) -> Opening: ...

    def checkpoint_info(
        self, opening: Opening, messages: Sequence[Message], invocation_message: Message
    ) -> dict[str, int] | None: ...

    def completion_write(
        self, run: Any, info: dict[str, int] | None, conversation: Sequence[Message], state: dict[str, Any]
    ) -> SessionWrite | None: ...

    def write_external(self, run_id: str, write: SessionWrite) -> None: ...

    def withdraw(self, run: Any) -> None: ...


__all__ = ["EngineRun", "EngineRuntime", "EngineSessions", "RunT"]
