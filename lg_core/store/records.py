"""Plain records read from and written to the run store."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pydantic_core

from lg_core.content import well_formed_text

RUN_ACTIVE = "running"
RUN_TERMINAL = ("completed", "failed", "partial", "cancelled")
# The largest integer the stores take (a signed 64-bit column): a limit, a sequence number or a
# time beyond it overflows in the driver, so entry points refuse it first.
MAX_COUNT = 2**63 - 1
STEP_OPEN = ("scheduled", "running")

# The done step a new run's first steps are scheduled by; its row keeps the run's first checkpoint.
START_STEP = "root/start"


def ended_step_status(run_status: str) -> str:
    """The status of a step that ends with its run: ``cancelled`` when the run was cancelled
    (or completed without it), ``failed`` when it failed or ran out of time.

    The step whose commit ends a run gets it, and so does every step still open
    then (closed in that commit): the statuses ``lg runs retry`` reschedules.
    """
    return "failed" if run_status in ("failed", "partial") else "cancelled"


def dumps(value: Any) -> str:
    """Compact JSON text (pydantic-core's encoder: ~5x faster than json.dumps on step records).

    Text with lone surrogates, which UTF-8 cannot encode (a model's stream that
    split an emoji's surrogate pair across two JSON escapes, a tool argument),
    is stored with its pairs joined and the lone halves as U+FFFD instead of
    failing the commit (lg_core.content.well_formed_text).
    """
    try:
        return pydantic_core.to_json(value).decode()
    except pydantic_core.PydanticSerializationError as exc:
        if "surrogates not allowed" not in str(exc):
            raise
        return pydantic_core.to_json(_well_formed(value)).decode()


def _well_formed(value: Any) -> Any:
    if isinstance(value, str):
        return well_formed_text(value)
    if isinstance(value, dict):
        return {_well_formed(key): _well_formed(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_well_formed(item) for item in value]
    return value


def loads(text: str | None) -> Any:
    return None if text is None else pydantic_core.from_json(text)


@dataclass(frozen=True, slots=True)
class RunRecord:
    """One stored run, as ``lg runs list`` and ``lg_core.list_runs()`` show it."""

    id: str
    entrypoint: str
    kind: str
    status: str
    invocation: dict[str, Any]
    session_id: str
    actor_id: str | None
    holder: str | None
    lease_until: float | None
    deadline_at: float | None
    cancel_requested: bool
    event_seq: int
    response: str | None
    error: dict[str, Any] | None
    usage: dict[str, Any] | None
    result: dict[str, Any] | None
    parent_run_id: str | None
    created_at: float
    updated_at: float
    finished_at: float | None
    interjections_pending: int = 0
    execution_state: dict[str, Any] | None = None
    # The step of ``parent_run_id`` waiting for this run (a child run), woken by its ending.
    parent_step_key: str | None = None

    @property
    def finished(self) -> bool:
        return self.status in RUN_TERMINAL

    @property
    def outcome(self) -> str | None:
        return self.status if self.finished else None


@dataclass(frozen=True, slots=True)
class RunOutcome:
    """How a run ended, without its invocation (which may be large): what a batch writes as a result line."""

    id: str
    status: str
    response: str | None
    error: dict[str, Any] | None
    usage: dict[str, Any] | None
    result: dict[str, Any] | None


@dataclass(frozen=True, slots=True)
class InterjectionAnswer:
    """Where one interjection stands, for a caller waiting for the model's reply to it.

    ``status`` is ``pending`` (no model turn has read it yet), ``answered`` (the
    model turn ``step`` read it and committed ``message``, its reply) or
    ``unanswered`` (the run ended without a turn reading it). ``numbers`` and
    ``interjection_ids`` are every interjection that turn read (the ids only of
    those given one); ``tool_calls`` says whether the reply scheduled tool calls.
    """

    status: str
    step: str | None = None
    message: dict[str, Any] | None = None
    numbers: tuple[int, ...] = ()
    interjection_ids: tuple[str, ...] = ()
    tool_calls: bool = False


@dataclass(frozen=True, slots=True)
class FrameRecord:
    id: str
    run_id: str
    path: str
    kind: str
    entrypoint: str
    version: int
    checkpoint: dict[str, Any]


@dataclass(frozen=True, slots=True)
class StepRecord:
    run_id: str
    key: str
    frame_id: str
    kind: str
    status: str
    input: dict[str, Any] | None
    result: dict[str, Any] | None
    error: dict[str, Any] | None
    attempts: int
    holder: str | None
    lease_until: float | None
    created_at: float
    started_at: float | None
    finished_at: float | None
    scheduled_by: str | None = None
    checkpoint: dict[str, Any] | None = None
    event_seq: int | None = None
    # An at_most_once tool call: when an attempt entered the tool's own code (lg_core.engine.at_most_once).
    body_entered_at: float | None = None

    @property
    def awaits_retry(self) -> bool:
        """Scheduled again because its last attempt raised (lg_core.engine._step_failures): the row
        keeps that attempt's error, and no message was sent for the next one (the relay sends it)."""
        return self.status == "scheduled" and self.attempts > 0 and (self.error or {}).get("attempt") == self.attempts


@dataclass(frozen=True, slots=True)
class RelayedStep:
    """A scheduled step the outbox relay sends now, and its back-off (lg_core.store.resend_backoff).

    ``missed``: its sends that found no consumer, this one included (0: this send
    delivers a retry). ``delay``: seconds until the relay sends it again unless a
    worker claims it. ``waited``: at least this long it has waited for a consumer.
    ``new_level``: this send moved it to a longer delay (report it once per level).
    """

    step: StepRecord
    missed: int
    delay: float
    waited: float
    new_level: bool


@dataclass(frozen=True, slots=True)
class ClaimedStep:
    """A worker's claim of a step and what it needs to start it, from one transaction.

    ``step`` is None when the step does not exist. ``attempts`` is the attempt
    the claim started, or None when nothing was claimed (the run is not
    running, the step is finished, or a live holder has it); ``step`` is then
    the row as it stands, for the caller to tell those cases apart. A claimed
    step comes with its frame and the frame's messages from ``messages_from``,
    and with its run's row when the claim was asked for it (``with_run``).
    """

    step: StepRecord | None
    run_status: str | None = None
    cancel_requested: bool = False
    interjections_pending: int = 0
    attempts: int | None = None
    frame: FrameRecord | None = None
    messages_from: int = 0
    messages: tuple[dict[str, Any], ...] = ()
    run: RunRecord | None = None


@dataclass(frozen=True, slots=True)
class EventRecord:
    run_id: str
    seq: int
    type: str
    data: dict[str, Any]
    created_at: float


@dataclass(frozen=True, slots=True)
class NewStep:
    """A step to schedule in a commit (its row is the outbox entry)."""

    key: str
    frame_id: str
    kind: str
    input: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class RunFinish:
    """Terminal fields written by the commit that ends a run."""

    status: str
    response: str | None
    error: dict[str, Any] | None
    usage: dict[str, Any] | None
    result: dict[str, Any] | None


@dataclass(frozen=True, slots=True)
class SessionWrite:
    """A completed run's turn for its session, appended in the run's finishing commit.

    ``messages`` are the sanitized Message objects to add; ``expected_count`` is
    the session's message count when the run loaded its history, so a writer
    that changed the session meanwhile makes the commit fail instead of
    silently losing a turn. ``metadata`` None keeps the stored metadata.
    """

    session_id: str
    actor_id: str | None
    messages: tuple[Any, ...]
    state: dict[str, Any]
    expected_count: int
    metadata: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class SessionReplace:
    """A whole session snapshot a step's commit writes (a managed child's transcript or registry).

    A replace, not an append, so a step executed again writes the same snapshot
    again instead of adding a turn twice.
    """

    session_id: str
    actor_id: str | None
    messages: tuple[Any, ...]
    state: dict[str, Any]
    metadata: dict[str, Any]


@dataclass(frozen=True, slots=True)
class ActivatedRun:
    """A pending run that became running because the run before it on its session ended.

    ``steps`` are its released first steps as (key, kind, frame_id); ``holder``
    is set for a local run (its own process drives it), None for a distributed one.
    """

    run_id: str
    holder: str | None
    steps: tuple[tuple[str, str, str], ...]


@dataclass(slots=True)
class StepCommit:
    """Everything one step writes, applied in a single transaction."""

    run_id: str
    frame_id: str
    expected_version: int
    checkpoint: dict[str, Any]
    step_key: str | None = None
    step_status: str = "succeeded"
    step_result: dict[str, Any] | None = None
    step_error: dict[str, Any] | None = None
    holder: str | None = None
    messages: list[tuple[int, Any]] = field(default_factory=list)  # (seq, Message)
    events: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    new_steps: list[NewStep] = field(default_factory=list)
    finish: RunFinish | None = None
    consumed_interjections: list[int] = field(default_factory=list)
    session: SessionWrite | None = None  # a completed run's turn, when its session lives in this database
    # Session snapshots replaced with this commit, when the session store lives in this database.
    session_replaces: tuple[SessionReplace, ...] = ()
    # The run's (session_id, actor_id) as its row holds them, set on a commit that ends the run: the
    # store then reads the runs its end may start with its guards instead of reading the row first.
    run_session: tuple[str, str | None] | None = None
    # Sibling steps may commit to the same frame at this moment (parallel tool calls of one turn),
    # so losing the frame's race is likely: RunStore.commit then reads its guards before writing.
    contended: bool = False
    # The new step this commit also claims for ``holder`` (attempt 1, a lease of
    # ``lease_seconds``), which the committing worker runs next itself: no claim of its own.
    claimed_successor: str | None = None
    lease_seconds: float = 0.0
    # The step parks (status ``waiting``, no holder, out of the outbox) until this child run ends;
    # refused with ``child_run_ended`` when it has ended already (the step then commits its result).
    waits_on: str | None = None
    # A child run's ending: wake the parent's step parked on it, in this transaction.
    wakes_parent: bool = False
    # An ending run that may have child runs: ask those still running to stop.
    cancels_children: bool = False
    # A parking step's timer (a subagent wait's long poll, an assembly step's retry_delay): when the
    # scheduler wakes it if nothing sooner does.
    wake_at: float | None = None
    # Steps of this run parked on what this commit records (a subagent turn's end): back in the outbox.
    wakes_steps: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class BatchRecord:
    """One submitted batch (lg_scheduler.batch): its inputs, counts and submitting process."""

    id: str
    agent: str
    input_hash: str
    input_path: str | None
    status: str  # running | finished
    total: int
    completed: int
    failed: int
    invalid: int
    running: int
    holder: str | None
    created_at: float
    updated_at: float
    finished_at: float | None

    @property
    def done(self) -> int:
        """Items with a final result (completed, failed or invalid)."""
        return self.completed + self.failed + self.invalid


@dataclass(frozen=True, slots=True)
class CommitResult:
    applied: bool
    reason: str | None = None
    first_seq: int = 0
    cancel_requested: bool = False
    activated: tuple[ActivatedRun, ...] = ()  # runs a finishing commit let start on its session
    interjections_pending: int = 0  # after this commit
    # The parent's parked step a child run's ending woke: (run_id, key, kind, frame_id), to publish.
    woken: tuple[tuple[str, str, str, str], ...] = ()


__all__ = [
    "START_STEP",
    "MAX_COUNT",
    "ActivatedRun",
    "BatchRecord",
    "ClaimedStep",
    "CommitResult",
    "EventRecord",
    "FrameRecord",
    "NewStep",
    "RUN_ACTIVE",
    "RUN_TERMINAL",
    "RunFinish",
    "RunOutcome",
    "RunRecord",
    "RelayedStep",
    "STEP_OPEN",
    "SessionReplace",
    "SessionWrite",
    "StepCommit",
    "StepRecord",
    "dumps",
    "ended_step_status",
    "loads",
]
