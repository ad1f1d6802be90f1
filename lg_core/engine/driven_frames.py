"""What an entrypoint class that drives its own frame (a Graph) works with.

The engine's side of such a run is private to the engine (``_driven_checkpoint``,
``_step_scope``); this module names the part of it the driving class uses: the
frame's checkpoint and start records, the scope of one of its steps
(``StepScope``: interrupts, events, commits and endings), the ``Transition`` a step
body returns, and the ``StaleStep`` a transition raises for a step already committed.
"""

from __future__ import annotations

from lg_core.engine._driven_checkpoint import DRIVEN_PHASE, DrivenCheckpoint, DrivenStart
from lg_core.engine._frames import FrameState
from lg_core.engine._step_scope import StaleStep, StepScope, Transition

__all__ = ["DRIVEN_PHASE", "DrivenCheckpoint", "DrivenStart", "FrameState", "StaleStep", "StepScope", "Transition"]
