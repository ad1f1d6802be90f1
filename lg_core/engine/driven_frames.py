"""What an entrypoint class that drives its own frame (a Graph) works with.

The engine's side of such a run is private to the engine (``_driven_checkpoint``,
``_step_scope``); this module names the part of it the driving class uses: the
frame's checkpoint and start records, the scope of one of its steps
(``StepScope``: interrupts, events, commits and endings), the ``Transition`` a step
body returns, and the ``StaleStep`` a transition raises for a step already committed;
and the history its run's opening loaded, for the participants that receive it.
"""

from __future__ import annotations

from lg_core.engine._driven_checkpoint import DRIVEN_PHASE, DrivenCheckpoint, DrivenStart, next_checkpoint
from lg_core.engine._frames import FrameState
from lg_core.engine._step_scope import StaleStep, StepScope, Transition
from lg_core.messages import Message


def run_history(scope: StepScope) -> tuple[Message, ...]:
    """The run's history: what its opening loaded (its session's messages, else the invocation's
    history for a new session), or the invocation's history when sessions are disabled."""
    messages = scope.frame.messages
    if scope.frame.checkpoint.session is None or not messages:
        return tuple(scope.run.invocation.history)
    return tuple(messages[:-1])  # the last is the caller's message


def session_history(scope: StepScope) -> tuple[Message, ...]:
    """The history the run's session held when it opened (as ``Hook.session_history`` chose it); none for
    a new session or without sessions."""
    info = scope.frame.checkpoint.session
    return run_history(scope) if info is not None and info.get("count", 0) > 0 else ()


__all__ = [
    "DRIVEN_PHASE",
    "DrivenCheckpoint",
    "DrivenStart",
    "FrameState",
    "StaleStep",
    "StepScope",
    "Transition",
    "next_checkpoint",
    "run_history",
    "session_history",
]
