"""Runtime: the services one configuration shares across runs.

It owns the run store, the model resolver, the engine, the local dispatcher
and the hooks. Build one explicitly only for an isolated setup; normally
``lg_core.current_runtime()`` builds it lazily from the active configuration.
"""

from __future__ import annotations

import logging
import threading
import warnings
from collections.abc import Callable, Mapping
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Any, cast

from lg_core.config import ConfigurationWarning, current_configuration
from lg_core.content import Document, Image, Text, well_formed_text
from lg_core.datamap import to_json_value
from lg_core.engine.background import ThreadBackend
from lg_core.engine.dispatcher import StepRef
from lg_core.engine.engine import Engine
from lg_core.engine.local import LocalDispatcher
from lg_core.entrypoints import check_importable_elsewhere
from lg_core.errors import (
    ERRORS_INCLUDING_CONTROL_FLOW,
    CancelledError,
    ConfigurationError,
    InvocationError,
    RunNotFoundError,
    RunStateError,
)
from lg_core.execution import Execution, follow_events
from lg_core.execution_backend import DistributedBackend, ExecutionBackend
from lg_core.hooks import Hook
from lg_core.invocation import _identifier, brief_error  # the one id rule shared with invocations
from lg_core.lease_holders import current_holder, holder_is_dead
from lg_core.messages import Message
from lg_core.models.resolver import ModelResolver
from lg_core.rate_limit import Limiter, LocalLimiter, RateLimit
from lg_core.run import Run, prepared_by
from lg_core.run_ids import run_id_to_look_up
from lg_core.sandbox import Sandbox
from lg_core.sandbox.run_resources import RunResources, build_resources, build_sandbox
from lg_core.sessions.declaration import build_session_store
from lg_core.sessions.run_sessions import RunSessions
from lg_core.store import RunRecord, RunStore
from lg_core.store.records import MAX_COUNT, RUN_ACTIVE, RUN_TERMINAL
from lg_core.workspace import Workspace

if TYPE_CHECKING:
    from lg_core.config import Configuration

_log = logging.getLogger(__name__)


# The settings a built ModelResolver reads, and so the ones configure(model_resolver=...) replaces.
_RESOLVER_SETTINGS = ("providers", "provider_adapters", "models", "default_model", "provider_credentials")


def _warn_of_settings_the_resolver_replaces(configuration: Configuration) -> None:
    """A ConfigurationWarning naming resolver settings that an application resolver makes inert.

    ``model_resolver`` is a complete override (the spec's Configuration#model_resolver), so
    ``models`` or ``providers`` configured beside it are never read: without a word, an
    edited ``lg.yaml`` role would seem to have no effect.
    """
    ignored = [name for name in _RESOLVER_SETTINGS if getattr(configuration, name)]
    if ignored:
        warnings.warn(
            f"configure(model_resolver=...) replaces the built resolver, so {', '.join(ignored)} "
            f"{'is' if len(ignored) == 1 else 'are'} not read; give them to your resolver "
            "(e.g. ModelResolver(providers=..., profiles=...)) or unset them",
            ConfigurationWarning,
            stacklevel=4,
        )


class Runtime:
    def __init__(self, configuration: Configuration) -> None:
        self.configuration = configuration
        self.store = RunStore(
            configuration.run_store,
            synchronous=configuration.sqlite_synchronous,
            relay_grace=configuration.relay_grace,
            relay_backoff_max=configuration.relay_backoff_max,
            pool_size=configuration.store_pool_size,
        )
        # An application's resolver (configure(model_resolver=...)) replaces the built one and stays its to close.
        self._owns_resolver = configuration.model_resolver is None
        if configuration.model_resolver is not None:
            _warn_of_settings_the_resolver_replaces(configuration)
        self.resolver = configuration.model_resolver or ModelResolver(
            providers=configuration.providers,
            provider_adapters=configuration.provider_adapters,
            profiles=configuration.models,
            default_model=configuration.default_model,
            credential_resolver=configuration.provider_credentials,
        )
        self.hooks: list[Hook] = [hook() for hook in configuration.hooks]
        # Sessions live in the run store's database unless configured otherwise (lg_core.sessions).
        self.session_store, self._owns_session_store = build_session_store(configuration.session_store, self.store)
        self.sessions = RunSessions(self.session_store, self.store, configuration.session_actor)
        self.engine = Engine(
            self,
            self.store,
            lease_seconds=configuration.lease_seconds,
            run_cache_size=configuration.run_cache_size,
            max_step_attempts=configuration.max_step_attempts,
            store_outage_patience=configuration.store_outage_patience,
        )
        self.dispatcher = LocalDispatcher(self.engine, max_workers=configuration.max_parallel_tools)
        self._backend: ExecutionBackend | None = None
        self._backend_lock = threading.Lock()
        self._local_limiter = LocalLimiter()
        self.rate_limits = {name: RateLimit.parse(text) for name, text in configuration.rate_limits.items()}

    @property
    def model_resolver(self) -> ModelResolver:
        """The resolver that turns model roles and targets into Models (the spec's
        ``Runtime#model_resolver``; ``resolver`` is the same object)."""
        return self.resolver

    def execute(self, run: Run) -> None:
        """Start ``run`` and drive it to its end in this process."""
        unsubscribe = self.engine.bus.subscribe(run.id, run.deliver)
        try:
            # A run stored pending behind another run of its session waits here for its turn.
            self.dispatcher.drive(self.engine.when_active(run, self.begin(run)))
        except BaseException:
            # The store failed, or a tool raised KeyboardInterrupt or SystemExit: the run
            # stays resumable, as if this process had been killed.
            self.engine.abandon(run.id)
            raise
        finally:
            unsubscribe()

    def begin(self, run: Run, *, distributed: bool = False) -> list[Any]:
        """Run the execution hooks and persist ``run``; returns its first steps."""
        if distributed and run.entrypoint_class is not None:
            check_importable_elsewhere(run.entrypoint_class)  # workers continue it from its import path
        for hook in self.hooks:
            hook.prepare_execution(run)
        return self.engine.start(run, distributed=distributed)

    # -- background executions ------------------------------------------------------

    @property
    def backend(self) -> ExecutionBackend:
        """How ``start_execution`` runs work: Celery workers when a broker is configured, else threads."""
        if self._backend is None:
            with self._backend_lock:
                if self._backend is None:
                    self._backend = self._build_backend()
        return self._backend

    def _build_backend(self) -> ExecutionBackend:
        if not self.configuration.broker_url:
            return ThreadBackend(self)
        entry = next((e for e in entry_points(group="littleghost.backends") if e.name == "celery"), None)
        if entry is None:
            raise ConfigurationError(
                "broker_url is set but no distributed backend is installed; install littleghost with its "
                "workers (lg_workers) or unset broker_url to run executions on threads"
            )
        return cast(ExecutionBackend, entry.load()(self))

    def distributed_backend(self, user: str = "this") -> DistributedBackend:
        """The backend when it sends steps to other processes (Celery workers); else a
        ConfigurationError saying that ``user`` needs broker_url, and how to set it."""
        backend = self.backend
        if not isinstance(backend, DistributedBackend):
            raise ConfigurationError(
                f"{user} needs broker_url (or LG_BROKER_URL), the Celery workers' broker, e.g. "
                "redis://127.0.0.1:6379/0; runs executed in-process are resumed with `lg runs resume`"
            )
        return backend

    @property
    def rate_limiter(self) -> Limiter:
        """Paces rate-limited model calls: shared through Redis with a broker, else in this runtime."""
        if not self.configuration.broker_url:
            return self._local_limiter
        backend = self.backend
        return backend.rate_limiter if isinstance(backend, DistributedBackend) else self._local_limiter

    def start_execution(self, run: Run) -> Execution:
        """Persist and start ``run``; the same request again under its run id re-attaches.

        A web request that timed out is retried by its client: with the request's
        idempotency key as ``run_id``, the retry finds the run the first try
        started and gets its Execution, instead of an error or a second run. A
        different request under a used run id is still refused.
        """
        run._begin()  # a Run object executes once: raises for one already started
        if self._started_as(run):  # before the backend: starting it would touch the live run's stream
            run.close()
            return self._reattached(run)
        try:
            self.backend.start(run)
        except BaseException as exc:
            # The spec: "If the work cannot start, this method closes run before raising."
            try:
                run.close()
            except ERRORS_INCLUDING_CONTROL_FLOW:  # the start failure is the error worth raising
                pass
            if isinstance(exc, InvocationError) and self._started_as(run):
                return self._reattached(run)
            raise
        return Execution(run.id, self, self.backend, run=run)

    def _reattached(self, run: Run) -> Execution:
        """The Execution of the run a repeated request started; its ``on_event`` follows that run."""
        execution = Execution(run.id, self, self.backend)
        if run._on_event is not None:
            follow_events(execution, run._on_event)
        return execution

    def _started_as(self, run: Run) -> bool:
        """Whether the store holds ``run``'s id for the same agent and request (its deadline aside)."""
        try:
            record = self.store.load_run(run.id)
        except RunNotFoundError:
            return False
        if record.entrypoint != run.entrypoint_path:
            return False
        stored, asked = dict(record.invocation), run.invocation.to_dict()
        stored.pop("deadline_at", None)
        asked.pop("deadline_at", None)
        return stored == asked

    def get_execution(self, run_id: str) -> Execution:
        run_id = run_id_to_look_up(run_id)
        self.store.load_run(run_id)  # RunNotFoundError for an unknown id
        return Execution(run_id, self, self.backend)

    def interject(
        self, run_id: str, message: Any, *, metadata: dict[str, Any] | None = None, interjection_id: str | None = None
    ) -> int:
        """Queue ``message`` for the run's next model turn (any process, any backend).

        With ``interjection_id`` a repeated call (a retried request) returns the first
        call's number instead of adding the message twice.
        """
        run_id = run_id_to_look_up(run_id)
        if interjection_id is not None:
            interjection_id = _identifier(interjection_id, "interjection_id")
        payload: dict[str, Any] = {
            "message": _interjection_message(message),
            "metadata": _interjection_metadata(metadata),
        }
        if self.hooks:
            # The Run executing here if there is one (hooks may register resources on it).
            run = self.engine.live_run(run_id) or self.get_run(run_id)
            for hook in self.hooks:
                payload = _prepared_interjection(hook, run, payload)
        seq = self.store.add_interjection(run_id, payload["message"].to_dict(), payload["metadata"], interjection_id)
        self.engine.note_interjections(run_id, 1)  # a run executing here reads it at its next model turn
        return seq

    def resume(self, run_id: str, *, force: bool = False, on_event: Any = None) -> Run:
        """Continue a run whose process died, without redoing committed steps.

        ``on_event`` receives the resumed run's events as they happen.
        """
        record = self.store.load_run(run_id_to_look_up(run_id))
        if record.status == "pending":
            raise RunStateError(
                f"run {run_id} has not started: it waits for the earlier runs of session {record.session_id!r} "
                "to finish and is activated by the database when they do; resume it after that if its process is gone"
            )
        if record.finished:
            return Run.from_record(record, self)
        self._check_holder(record, force)
        if record.cancel_requested:
            # Cancelled while its process was gone: ending it runs none of the agent's code, so it
            # ends even where the agent cannot be imported (a script's __main__ agent).
            self.engine.end_run(
                record.id, "cancelled", CancelledError("the run was cancelled while its process was gone")
            )
            return Run.from_record(self.store.load_run(record.id), self)
        run = self.restored_run(record)
        run._on_event = on_event
        run._begin()
        return self.drive_here(run, lambda: self.engine.resume_refs(run, record.holder))

    def drive_here(self, run: Run, first_steps: Callable[[], list[StepRef]]) -> Run:
        """Execute the started ``run`` in this process until it ends, from the steps
        ``first_steps`` names, called once the run's events reach it (so none is missed)."""
        unsubscribe = self.engine.bus.subscribe(run.id, run.deliver)
        try:
            self.dispatcher.drive(first_steps())
        finally:
            unsubscribe()
            run._phase = "finished"
            run.close()
        if run.outcome is None:
            run.refresh()
        return run

    def _check_holder(self, record: RunRecord, force: bool) -> None:
        """Resume takes over only a run nobody is executing: its steps would otherwise run twice."""
        if force:
            return
        holder = record.holder
        if holder is None:
            raise RunStateError(
                f"run {record.id} executes on workers; if a worker died, `lg scheduler` sends its steps again "
                "once their lease expires. Pass force=True / --force to run its open steps in this process "
                "anyway (only when no worker will)"
            )
        if self.engine.live_run(record.id) is not None:
            raise RunStateError(f"run {record.id} is executing in this process; wait for it or cancel it")
        if holder == current_holder() or holder_is_dead(holder):
            return
        raise RunStateError(
            f"run {record.id} is still held by process {holder}, which looks alive; "
            "resume only runs whose process died (pass force=True / --force if that process is on another "
            "host and you know it is gone)"
        )

    def restored_run(self, record: RunRecord) -> Run:
        """An unfinished stored run, rebuilt in this process to execute its steps.

        Resources that ``Hook.prepare_run`` registered belong to the process
        that built the run (a web request's connection, a tenant's client), so a
        worker, a resume or a retry that continues the run gets its own: the
        hooks run again here. The process that ends the run closes them with
        it; a worker that only executed some of its steps closes them when its
        run cache drops the run between steps, or when it shuts down (Engine).
        """
        return prepared_by(Run.from_record(record, self), self.hooks)

    def build_workspace(self, run_id: str, invocation: Any = None) -> Workspace | None:
        """The unopened Workspace the ``workspace`` setting declares for ``run_id`` (None when unset)."""
        return self.run_resources(run_id, invocation).workspace

    def build_sandbox(self, workspace: Workspace, invocation: Any = None) -> Sandbox | None:
        """The unopened Sandbox the ``sandbox`` setting declares around ``workspace`` (None when unset)."""
        setting = self.configuration.sandbox
        return None if setting is None else build_sandbox(setting, workspace)

    def run_resources(self, run_id: str, invocation: Any = None) -> RunResources:
        """The unopened workspace and sandbox one step of ``run_id`` works with, built from the settings
        again for every step: a step may run on any worker, so none of them is kept between steps."""
        configuration = self.configuration
        return build_resources(configuration.workspace, configuration.sandbox, run_id, invocation)

    def run_to_end(self, record: RunRecord) -> Run:
        """A Run rebuilt from its record alone, without ``Hook.prepare_run``: enough to end it
        (cancel, deadline, out of attempts) when its prepared form cannot be built here."""
        return Run.from_record(record, self, to_end=True)

    def get_run(self, run_id: str) -> Run:
        return Run.from_record(self.store.load_run(run_id_to_look_up(run_id)), self)

    def list_runs(self, status: str | None = None, limit: int = 100) -> list[RunRecord]:
        """Stored runs, newest first; an unknown ``status`` (a typo) is an error, not an empty list."""
        statuses = ("pending", RUN_ACTIVE, *RUN_TERMINAL)
        if status is not None and status not in statuses:
            raise InvocationError(f"status must be one of {', '.join(statuses)} or None, got {status!r}")
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_COUNT:
            # (a larger one would overflow the store's integer in the driver)
            shown = repr(limit) if not isinstance(limit, int) or limit <= MAX_COUNT else "a larger one"
            raise InvocationError(f"limit must be an integer from 1 to {MAX_COUNT}, got {shown}")
        return self.store.list_runs(status=status, limit=limit)

    def cancel(self, run_id: str, reason: str | None = None) -> bool:
        """Request cancellation: at once for a run executing in this process, else at its next check.

        A run still waiting for its session ends at once. Returns False when the
        run had already finished. A pending run activated between the two checks
        (its session's earlier run just ended) is asked again, so no cancel is lost.
        """
        run_id = run_id_to_look_up(run_id)
        reason = reason or "cancellation was requested"
        live = self.engine.live_run(run_id)
        if live is not None:
            live.cancellation_token.cancel(reason)
        for _attempt in range(_CANCEL_ATTEMPTS):
            if self.store.request_cancel(run_id):
                return True
            status = self.store.run_flags(run_id)[0]  # raises RunNotFoundError for an unknown id
            if status == "pending" and self.engine.cancel_pending(run_id, reason):
                return True
            if status not in ("pending", "running"):
                return False
        return False

    def close(self) -> None:
        if self._backend is not None and hasattr(self._backend, "shutdown"):
            self._backend.shutdown()
        self.dispatcher.shutdown()
        self.engine.close()
        if self._owns_resolver:
            self.resolver.close()
        close_sessions = getattr(self.session_store, "close", None)
        if self._owns_session_store and close_sessions is not None:
            close_sessions()
        self.store.close()


_CANCEL_ATTEMPTS = 5  # each retry follows a pending run's activation, which happens once


_INTERJECTION_CONTENT = (Text, Image, Document)


def _interjection_message(message: Any) -> Message:
    """The interjection as a user Message of text, image or document content (InvocationError otherwise).

    The spec: "Messages may contain only text, image, or document content." Tool
    calls, tool results and reasoning belong to the model's turns; a caller that
    could send them could forge a tool's result.
    """
    if message is None:
        raise InvocationError("an interjection needs a message: interject('your text', ...)")
    try:
        normalized = Message.coerce(message)
    except (ValueError, TypeError) as exc:
        raise InvocationError(f"the interjection is not a valid message: {brief_error(exc)}") from None
    if normalized.role != "user":
        raise InvocationError(f"an interjection must be a non-empty user message, got a {normalized.role} message")
    other = sorted(
        {type(block).__name__ for block in normalized.content if not isinstance(block, _INTERJECTION_CONTENT)}
    )
    if other:
        raise InvocationError(f"an interjection may carry only text, image or document content, got {', '.join(other)}")
    if all(isinstance(block, Text) and not block.text.strip() for block in normalized.content):
        raise InvocationError("an interjection must be a non-empty user message")
    for block in normalized.content:
        if isinstance(block, Text) and well_formed_text(block.text) != block.text:
            # Refused like an invocation's (Invocation.check_storable): the caller can fix it.
            raise InvocationError(
                "the interjection holds text that is not valid Unicode (a lone surrogate); "
                "fix or drop that character before sending it"
            )
    return normalized


def _prepared_interjection(hook: Hook, run: Run, payload: dict[str, Any]) -> dict[str, Any]:
    """What ``hook.prepare_interjection`` made of ``payload``, held to the caller's rules.

    A hook may replace the message (to materialize trusted attachments) or the
    metadata, but what it returns is checked like the caller's input, so a hook
    cannot slip in an assistant message or data the store cannot keep. A broken
    hook is the application's setup: ConfigurationError, naming it.
    """
    prepared = hook.prepare_interjection(run, dict(payload)) or payload
    where = f"{type(hook).__name__}.prepare_interjection"
    if not isinstance(prepared, Mapping) or "message" not in prepared:
        raise ConfigurationError(
            f"{where} must return a mapping with 'message' (or None), got {type(prepared).__name__}"
        )
    try:
        return {
            "message": _interjection_message(prepared["message"]),
            "metadata": _interjection_metadata(prepared.get("metadata")),
        }
    except InvocationError as exc:
        raise ConfigurationError(f"{where} returned an invalid interjection: {exc}") from None


def _interjection_metadata(metadata: Any) -> dict[str, Any]:
    """An interjection's metadata as plain JSON: InvocationError before anything is stored."""
    if metadata is None:
        return {}
    if not isinstance(metadata, Mapping):
        raise InvocationError(f"interjection metadata must be a mapping, got {type(metadata).__name__}")
    try:
        return cast("dict[str, Any]", to_json_value(dict(metadata), path="metadata"))
    except (TypeError, ValueError) as exc:
        raise InvocationError(f"interjection {exc}") from None


def current_runtime() -> Runtime:
    """The Runtime of the configuration active here (``with_configuration``'s, else the process
    default), built on first use."""
    return current_configuration().runtime()


def model_resolver() -> ModelResolver:
    """The active configuration's ModelResolver (the spec's ``LittleGhost.model_resolver``):
    ``model_resolver().resolve("customer_support")``. It belongs to the shared Runtime, so
    this builds the runtime (and locks the configuration) as the first agent call would."""
    return current_runtime().model_resolver


__all__ = ["Runtime", "current_runtime", "model_resolver"]
