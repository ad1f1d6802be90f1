"""One call of a subagent control tool: a change to the manager's ledger, committed with the call.

The ledger lives in the parent frame's checkpoint, so the call's result is
computed in its transition from the frame's latest state (a sibling call or a
child turn may have committed since the step began; a lost version race re-runs
only this). Spawning or sending queues turns; the commit starts those the
ledger's ``max_concurrent`` allows as ``subagent_turn`` steps. A bound reached is
a failed tool result the model reads; the run goes on.

Waiting (``wait_for_subagents``, or a ``sync`` spawn or send) returns at once when
progress is there. Otherwise, on a worker, the step parks: it commits as
``waiting`` with its deadline in the ledger's waiters and in the step row's
``wake_at``, holding no thread; a child turn's ending commit puts it back in the
outbox, and the scheduler does when the deadline passes. Executed again, it finds
itself among the waiters and answers with the progress made, or ``still_working``
once the deadline has passed. A local run (no broker) blocks the step's thread
instead, reading the frame until progress or the deadline; there a ``sync``
spawn or send answers at once, as ``async`` does, since the turn it queues starts
only with this call's commit.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import time
import uuid
from typing import Any

from lg_core.assemblies.child_runs import child_run_id
from lg_core.engine.driven_frames import FrameState, StaleStep, StepScope, Transition
from lg_core.engine.tool_call_bodies import SUBAGENT_TURN_KIND, ToolCall, subagent_turn_key
from lg_core.errors import Error, InvocationError, ToolError
from lg_core.store import NewStep, StepCommit
from lg_core.store.records import InterjectionAnswer
from lg_core.subagents._interjection_reply import (
    LOCAL_POLL_SECONDS,
    PARKED_RECHECK_SECONDS,
    block_for_reply,
    reply_view,
)
from lg_core.subagents._run_agent_path import run_agent_path
from lg_core.subagents.agent_path import ROOT
from lg_core.subagents.control_inputs import (
    INTERJECT,
    SEND,
    InterjectInput,
    ListInput,
    SendInput,
    SpawnInput,
    WaitInput,
    parse_input,
)
from lg_core.subagents.ledger import Ledger
from lg_core.subagents.options import SubagentOptions
from lg_core.subagents.persistence import ChildPersistence
from lg_core.tool import ToolOutcome, success_outcome


def ledger_of(checkpoint: Any, options: SubagentOptions, agent_path: str = ROOT) -> Ledger:
    """A copy of the ledger in ``checkpoint``; before the first spawn an empty one placing its
    children below ``agent_path``, the path of the Agent whose run this is."""
    stored = checkpoint.subagents
    if stored is None:
        return Ledger(options.limits, agent_path)
    return Ledger.from_dict(json.loads(json.dumps(stored)), options.limits)


def turn_steps(state: FrameState, ledger: Ledger) -> list[NewStep]:
    """The ``subagent_turn`` steps of the queued turns the ledger starts now."""
    return [
        NewStep(
            key=subagent_turn_key(state.path, turn.queued_seq, identity.subagent_id.rpartition("/")[2]),
            frame_id=state.id,
            kind=SUBAGENT_TURN_KIND,
            input={
                "subagent_id": identity.subagent_id,
                "kind": identity.kind,
                "number": turn.number,
                "message": turn.message,
                "conversation_id": identity.conversation_id,
            },
        )
        for identity, turn in ledger.turns_to_start()
    ]


def with_ledger(state: FrameState, ledger: Ledger) -> FrameState:
    """``state`` whose checkpoint holds ``ledger``."""
    checkpoint = state.checkpoint.copy()
    checkpoint.subagents = ledger.to_dict()
    return dataclasses.replace(state, checkpoint=checkpoint)


class _Wait:
    """An operation's answer that depends on progress: the identities to watch (None: all)."""

    def __init__(self, ids: list[str] | None, first: dict[str, Any] | None = None) -> None:
        self.ids, self.first = ids, first


class SubagentControlCall(ToolCall):
    """The step body of a control-tool call of an Agent that declares subagents."""

    def __init__(self, scope: StepScope, options: SubagentOptions) -> None:
        super().__init__(scope)
        self.options = options
        self.agent_path = ROOT  # where this run's Agent sits; a first spawn places its children below it

    def perform(self) -> Transition:
        scope, use = self.scope, self.tool_use
        scope.build_context(scope.frame.checkpoint)
        scope.check_interrupt()
        if scope.frame.checkpoint.subagents is None:  # the run's first control call (read outside a commit)
            self.restored = self._persisted_identities()  # its session's children
            self.agent_path = run_agent_path(scope.engine.store, scope.run)  # where its children sit
        if scope.key not in ledger_of(scope.frame.checkpoint, self.options).waiters:  # not a woken wait
            scope.emit("tool_execution_start", id=use.id, name=use.name, input=dict(use.input))
        if use.name == INTERJECT:
            self._interject()
        elif scope.holder is None:
            self._wait_here()
        return self._transition()

    # -- waiting ---------------------------------------------------------------------------

    def _wait_here(self) -> None:
        """A local run's wait: block until the watched identities make progress or the deadline passes."""
        scope = self.scope
        ledger = ledger_of(scope.frame.checkpoint, self.options)
        try:
            answer = self._operate(ledger)
        except (InvocationError, ToolError):
            return  # refused: the transition reports it
        if not isinstance(answer, _Wait) or answer.first is not None:
            return  # a sync spawn or send queues its turn with this commit: locally it answers at once
        deadline = time.monotonic() + self.options.long_poll_duration
        store = scope.engine.store
        while time.monotonic() < deadline:
            scope.check_interrupt()
            fresh = ledger_of(_checkpoint_view(store.load_frame(scope.frame.id).checkpoint), self.options)
            try:
                ready, _ = fresh.progress(answer.ids)
            except ToolError:
                return
            if ready:
                return
            time.sleep(LOCAL_POLL_SECONDS)
        self.timed_out = True

    timed_out = False
    restored: list[dict[str, Any]] = []

    def _persisted_identities(self) -> list[dict[str, Any]]:
        """The registry entries of the parent session's persisted children whose kind still persists."""
        persistence = ChildPersistence.of(self.scope)
        if persistence is None:
            return []
        definitions = self.options.definitions(self.scope.run.invocation)
        return [
            entry
            for entry in persistence.registry()
            if (definition := definitions.get(str(entry.get("kind")))) is not None and definition.persist
        ]

    # -- the ledger change -------------------------------------------------------------------

    def _operate(self, ledger: Ledger) -> dict[str, Any] | _Wait:
        """Apply this call to ``ledger``: its reply, or the identities whose progress it waits for."""
        use, options = self.tool_use, self.options
        kinds = tuple(options.definitions(self.scope.run.invocation))
        parsed = parse_input(use.name, use.input, options.limits, kinds)
        if isinstance(parsed, SpawnInput):
            conversation_id = _conversation_id(self.scope.run.id, parsed.task_name)
            identity = ledger.spawn(parsed.kind, parsed.task_name, parsed.task, conversation_id, time.time())
            spawned = {"subagent_id": identity.subagent_id, "status": "working"}
            return _Wait([identity.subagent_id], spawned) if parsed.mode == "sync" else spawned
        if isinstance(parsed, SendInput):
            turn = ledger.send(parsed.subagent_id, parsed.message)
            queued = {"subagent_id": parsed.subagent_id, "status": "queued", "turn": turn.number}
            return _Wait([parsed.subagent_id], queued) if parsed.mode == "sync" else queued
        if isinstance(parsed, WaitInput):
            ledger.progress(parsed.subagent_ids)  # an unknown id is refused now
            return _Wait(parsed.subagent_ids)
        if isinstance(parsed, ListInput):
            page, cursor = ledger.listing(parsed.kind, parsed.limit, parsed.cursor)
            return {"subagents": [ledger.snapshot(i, mark_seen=False) for i in page], "next_cursor": cursor}
        assert isinstance(parsed, InterjectInput)
        ledger.identity(parsed.subagent_id)
        if self.delivered is None or self.reply is None:
            raise ToolError(f"{INTERJECT}: {self.undelivered}")
        return reply_view(parsed.subagent_id, self.delivered, self.reply, ledger)

    # -- interjecting ------------------------------------------------------------------------

    delivered: int | None = None  # the interjection's number in the child run
    interjected_run = ""  # the child run it was delivered to
    reply: InterjectionAnswer | None = None  # where the child's response to it stands
    reply_deadline = 0.0
    undelivered = ""

    def _interject(self) -> None:
        """Deliver an interjection to the child run of the identity's running turn, then read (locally:
        wait for) the child's response to it, outside any transaction.

        Its id is derived from this step, so an attempt executed again delivers it once; a call
        woken after parking finds what it delivered in the ledger (the turn may have ended since)."""
        scope = self.scope
        ledger = ledger_of(scope.frame.checkpoint, self.options)
        parked = ledger.interjections.get(scope.key)
        if parked is not None:
            self.interjected_run, self.delivered = parked
        else:
            self._deliver(ledger)
        if self.delivered is None:
            return
        waiter = ledger.waiters.get(scope.key)
        self.reply_deadline = waiter[1] if waiter is not None else time.time() + self.options.long_poll_duration
        store = scope.engine.store
        if scope.holder is None:
            self.reply = block_for_reply(
                store, self.interjected_run, self.delivered, self.reply_deadline, scope.check_interrupt
            )
        else:
            self.reply = store.interjection_answer(self.interjected_run, self.delivered)

    def _deliver(self, ledger: Ledger) -> None:
        scope, use = self.scope, self.tool_use
        try:
            parsed = parse_input(use.name, use.input, self.options.limits)
        except InvocationError:
            return
        assert isinstance(parsed, InterjectInput)
        identity = ledger.identities.get(parsed.subagent_id)
        running = None if identity is None else next((t for t in identity.turns if t.status == "running"), None)
        if identity is None or running is None:
            self.undelivered = f"{parsed.subagent_id} has no running turn; queue a follow-up with {SEND}"
            return
        turn_key = subagent_turn_key(scope.frame.path, running.queued_seq, identity.subagent_id.rpartition("/")[2])
        child_id = child_run_id(scope.run.id, turn_key)
        key = hashlib.sha256(f"{scope.run.id}\n{scope.key}".encode()).hexdigest()[:32]
        try:
            runtime: Any = scope.engine.runtime  # the Runtime (the engine sees it through a protocol)
            self.delivered = runtime.interject(child_id, parsed.message, interjection_id=key)
            self.interjected_run = child_id
        except Error as exc:
            self.undelivered = f"{parsed.subagent_id}'s turn is not taking messages now ({exc}); try again or {SEND}"

    def _transition(self) -> Transition:
        scope = self.scope
        mark = len(scope.durable)
        now = time.time()
        long_poll = self.options.long_poll_duration

        def transition(state: FrameState) -> StepCommit:
            del scope.durable[mark:]  # a transition re-run after a lost race emits its events once
            ledger = ledger_of(state.checkpoint, self.options, self.agent_path)
            if state.checkpoint.subagents is None:
                ledger.restore(self.restored)
            waiter = ledger.waiters.pop(scope.key, None)
            if self.tool_use.name == INTERJECT:
                ledger.interjections.pop(scope.key, None)
                return self._interjection_commit(state, ledger, parked=waiter is not None)
            if waiter is None:
                try:
                    answer = self._operate(ledger)
                except (InvocationError, ToolError) as exc:
                    return self._commit(state, ledger, ToolOutcome.failure(str(exc), "tool_error"), changed=False)
                if not isinstance(answer, _Wait):
                    return self._commit(state, ledger, success_outcome(answer))
                if answer.first is not None and scope.holder is None:
                    return self._commit(state, ledger, success_outcome(answer.first))
                ids, deadline = answer.ids, now + long_poll
            else:
                ids, deadline = waiter
            ready, selected = ledger.progress(ids)
            timed_out = self.timed_out or time.time() >= deadline - 0.05
            if ready or timed_out or scope.holder is None:
                status = "ready" if ready else "still_working"
                self.still_working = not ready
                views = [ledger.snapshot(i, mark_seen=ready) for i in selected]
                return self._commit(state, ledger, success_outcome({"status": status, "subagents": views}))
            ledger.waiters[scope.key] = (ids, deadline)
            parked = with_ledger(state, ledger)
            return scope.commit_for(
                parked,
                parked.checkpoint,
                step_status="waiting",
                new_steps=turn_steps(state, ledger),
                wake_at=deadline,
                contended=True,
            )

        return transition

    def _interjection_commit(self, state: FrameState, ledger: Ledger, *, parked: bool) -> StepCommit:
        """The interject call's answer, or (on a worker, no response yet, the long poll not passed) its
        step parked as a waiter, executed again by its turn's end or by the ``wake_at`` recheck."""
        scope = self.scope
        try:
            view = self._operate(ledger)
        except (InvocationError, ToolError) as exc:
            return self._commit(state, ledger, ToolOutcome.failure(str(exc), "tool_error"), changed=parked)
        assert isinstance(view, dict)
        now = time.time()
        pending = view["status"] == "still_working"
        if not pending or scope.holder is None or self.timed_out or now >= self.reply_deadline - 0.05:
            self.still_working = pending
            return self._commit(state, ledger, success_outcome(view))
        assert self.delivered is not None
        ledger.waiters[scope.key] = ([view["subagent_id"]], self.reply_deadline)
        ledger.interjections[scope.key] = (self.interjected_run, self.delivered)
        waiting = with_ledger(state, ledger)
        return scope.commit_for(
            waiting,
            waiting.checkpoint,
            step_status="waiting",
            wake_at=min(self.reply_deadline, now + PARKED_RECHECK_SECONDS),
            contended=True,
        )

    still_working = False  # this call answers still_working: no tool-loop repeat (ToolCall's loop_neutral)

    def _step_result_extra(self) -> dict[str, Any]:
        return {"loop_neutral": True} if self.still_working else {}

    def _commit(self, state: FrameState, ledger: Ledger, outcome: ToolOutcome, *, changed: bool = True) -> StepCommit:
        """The call's ordinary commit (ToolCall's: the result, the turn's fan-in), with the ledger it changed."""
        starts = turn_steps(state, ledger) if changed else []
        commit = self._record(outcome)(with_ledger(state, ledger) if changed else state)
        if not isinstance(commit, StepCommit):
            raise StaleStep(f"subagent control call {self.scope.key}: no commit")
        commit.new_steps.extend(starts)
        return commit


def _checkpoint_view(stored: dict[str, Any]) -> Any:
    """A stored checkpoint dict as the attribute view ``ledger_of`` reads."""
    return type("StoredCheckpoint", (), {"subagents": stored.get("subagents")})()


def _conversation_id(run_id: str, task_name: str) -> str:
    """A durable conversation id, the same for every attempt of the spawning call."""
    digest = hashlib.sha256(f"{run_id}\n{task_name}".encode()).digest()
    return str(uuid.UUID(bytes=digest[:16], version=4))


__all__ = ["SubagentControlCall", "ledger_of", "turn_steps", "with_ledger"]
