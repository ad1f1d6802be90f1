"""One subagent turn: the body of a ``subagent_turn`` step, the child's turn run as a child run.

Execute: build the child's Agent class from its kind's definition (the factory is
given the child's agent path), and run the turn's message as a child run whose id
is derived from the parent run and this step's key, continuing the conversation
from the child run of the identity's last completed turn (its transcript is that
run's committed messages). Locally the child runs nested on this step's thread; on
a worker it runs on the workers while this step parks, and the child's ending
wakes it (lg_core.assemblies.child_runs).

Commit: the turn's outcome in the manager's ledger (a completed turn's answer and
run, where the next turn continues; a failed or cancelled turn's error, leaving no
history), the child's usage added to the parent's, the next queued turns started,
and the parent's parked waits put back in the outbox. A completed turn of a kind
that persists also replaces the child's transcript and the parent session's
registry in the session store (lg_core.subagents.persistence), in this commit when
the store shares the run store's database.
"""

from __future__ import annotations

from typing import Any

from lg_core.agent_stream import DELEGATION, AgentStreamStep
from lg_core.assemblies.child_runs import child_run_id, park_on_child, start_or_find_child
from lg_core.engine.driven_frames import FrameState, StaleStep, StepScope, Transition
from lg_core.errors import ConfigurationError
from lg_core.run import Run
from lg_core.store import StepCommit
from lg_core.store.records import SessionReplace
from lg_core.subagents._control_step import ledger_of, turn_steps, with_ledger
from lg_core.subagents.ledger import Ledger
from lg_core.subagents.options import SubagentOptions
from lg_core.subagents.persistence import ChildPersistence
from lg_core.usage import Usage


class SubagentTurnStep:
    partial_text = ""  # the child streams its own text (StepBody)

    def __init__(self, scope: StepScope, options: SubagentOptions) -> None:
        self.scope, self.options = scope, options
        self.input: dict[str, Any] = dict(scope.input or {})

    def perform(self) -> Transition:
        scope, turn = self.scope, self.input
        scope.check_interrupt()
        child_id = child_run_id(scope.run.id, scope.key)
        agent_class = self._agent_class()
        step = AgentStreamStep(
            assembly_id=str(scope.agent_class.agent_id),
            assembly_kind=DELEGATION,
            participant=str(turn["kind"]),
            step_id=str(turn["subagent_id"]),
        )
        options: dict[str, Any] = {}
        history = self._history()
        if history:
            options["history"] = history
        child = start_or_find_child(scope, agent_class, turn["message"], child_id, step, **options)
        if child is None:
            return park_on_child(scope, child_id, still_open=self._still_open, after=self._after, what="subagent turn")
        return self._after(child, child_id)

    def _agent_class(self) -> Any:
        kind = self.input["kind"]
        definition = self.options.definitions(self.scope.run.invocation).get(kind)
        if definition is None:
            raise ConfigurationError(
                f"subagent kind {kind!r} is no longer declared by {self.scope.agent_class.__qualname__}"
            )
        arguments = [self.input["subagent_id"]]
        if definition.accepts_conversation_id:
            arguments.append(self.input["conversation_id"])
        keywords = {"runtime": self.scope.engine.runtime} if definition.factory_takes_runtime else {}
        made = definition.factory(*arguments, **keywords)
        agent_class = made if isinstance(made, type) else type(made)
        if getattr(agent_class, "assembly_kind", None) != "agent":
            raise ConfigurationError(f"the factory of subagent kind {kind!r} must return an Agent class")
        return agent_class

    def _history(self) -> list[Any]:
        """The messages of the identity's last completed turn's child run (or, for an identity restored
        from the parent's session, its persisted transcript): where this turn continues."""
        ledger = ledger_of(self.scope.frame.checkpoint, self.options)
        identity = ledger.identities.get(self.input["subagent_id"])
        if identity is None or (identity.history_run is None and identity.completed_turns == 0):
            return []  # a first turn
        if identity.history_run is None:  # completed turns in an earlier run: the transcript its session kept
            persistence = self._persistence()
            return [] if persistence is None else persistence.transcript(identity.conversation_id)
        record = self.scope.engine.store.load_run(identity.history_run)
        runtime: Any = self.scope.engine.runtime
        result = Run.from_record(record, runtime).result
        return [] if result is None else list(result.messages)

    def _still_open(self, state: FrameState) -> bool:
        ledger = ledger_of(state.checkpoint, self.options)
        identity = ledger.identities.get(self.input["subagent_id"])
        return identity is not None and bool(identity.turns) and identity.turns[0].number == self.input["number"]

    def _after(self, child: Run, child_id: str) -> Transition:
        scope, turn = self.scope, self.input
        outcome = "completed" if child.completed else ("cancelled" if child.cancelled else "failed")
        text = child.response if child.completed else (str(child.error) if child.error else outcome)
        usage = child.usage
        persistence = self._persistence() if child.completed else None  # only completed turns become history
        transcript = list(child.result.messages) if persistence is not None and child.result is not None else []

        def transition(state: FrameState) -> StepCommit:
            ledger = ledger_of(state.checkpoint, self.options)
            if not ledger.turn_ended(turn["subagent_id"], turn["number"], outcome, text, child_id):  # type: ignore[arg-type]
                raise StaleStep(f"subagent turn {scope.key} is already recorded")
            starts = turn_steps(state, ledger)
            recorded = with_ledger(state, ledger)
            checkpoint = recorded.checkpoint
            checkpoint.usage = (Usage.from_dict(checkpoint.usage) + usage).to_dict()
            snapshots: tuple[SessionReplace, ...] = ()
            if persistence is not None:
                snapshots = self._snapshots(persistence, ledger, transcript)
                if not persistence.in_commit:  # a store elsewhere: written first, the same snapshots if re-run
                    persistence.write_outside_commit(snapshots)
                    snapshots = ()
            commit = scope.commit_for(
                recorded,
                checkpoint,
                step_result={"child_run_id": child_id, "outcome": outcome},
                new_steps=starts,
                wakes_steps=tuple(ledger.waiters),
                contended=True,
            )
            commit.session_replaces = snapshots
            return commit

        return transition

    def _persistence(self) -> ChildPersistence | None:
        """Where this child is kept across the parent session's runs; None when its kind is not persisted."""
        definition = self.options.definitions(self.scope.run.invocation).get(self.input["kind"])
        if definition is None or not definition.persist:
            return None
        return ChildPersistence.of(self.scope)

    def _snapshots(
        self, persistence: ChildPersistence, ledger: Ledger, transcript: list[Any]
    ) -> tuple[SessionReplace, ...]:
        """The completed turn's transcript, and the registry of every persisted identity the ledger holds."""
        definitions = self.options.definitions(self.scope.run.invocation)
        registry = [
            ledger.registry_entry(identity)
            for identity in ledger.identities.values()
            if identity.completed_turns > 0
            and (definition := definitions.get(identity.kind)) is not None
            and definition.persist
        ]
        entry = ledger.registry_entry(ledger.identity(self.input["subagent_id"]))
        return persistence.turn_snapshots(entry, transcript, registry)


__all__ = ["SubagentTurnStep"]
