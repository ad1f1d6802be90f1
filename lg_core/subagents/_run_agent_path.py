"""The agent path of the Agent a run executes: where the subagents it spawns are placed.

A run's Agent sits at ``/root`` unless the run is one turn of a managed subagent:
then the Agent is that subagent, and its own children go below its path
(``/root/alpha/x``), as the spec's AgentPath rules nest delegations. A turn's child
run names its parent step (``Run.parent_step``), and that ``subagent_turn`` step's
input holds the subagent's path, so nothing extra is stored on the run.
"""

from __future__ import annotations

from typing import Any

from lg_core.engine.subagent_turns import SUBAGENT_TURN_KIND
from lg_core.subagents.agent_path import ROOT, validate


def run_agent_path(store: Any, run: Any) -> str:
    """``/root``, or the path of the subagent whose turn ``run`` is (read from its parent's turn step)."""
    parent = getattr(run, "parent_step", None)
    if parent is None:
        return ROOT
    step = store.load_step(*parent)
    if step is None or step.kind != SUBAGENT_TURN_KIND:
        return ROOT
    return validate((step.input or {}).get("subagent_id", ROOT))


__all__ = ["run_agent_path"]
