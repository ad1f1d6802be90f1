"""The five tools a parent's model manages its subagents with, as the model is offered them.

``SubagentControlTools`` is the tool provider an Agent declaring subagents adds to
its registry: ``spawn_subagent`` (whose ``kind`` lists the run's kinds, each
described), ``send_subagent_message``, ``interject_subagent``,
``wait_for_subagents`` and ``list_subagents``, with the JSON Schemas of
lg_core.subagents.control_inputs. What a call does is not the tool's ``call``:
its result is a change to the manager's ledger in the parent frame's checkpoint,
committed with the call's step, so the Agent class executes these calls with a
step body of its own (lg_core.subagents._control_step).
"""

from __future__ import annotations

from typing import Any

from lg_core.errors import ToolError
from lg_core.subagents.control_inputs import INTERJECT, LIST, SEND, SPAWN, WAIT, input_schema
from lg_core.subagents.definition import Definition
from lg_core.tool import Binding, Tool

_DESCRIPTIONS = {
    SPAWN: "Start a subagent of one of these kinds on a task. It runs while you go on; mode 'sync' waits "
    "for its answer. Kinds:\n{kinds}",
    SEND: "Queue a follow-up message for an existing subagent (first in, first out; it never interrupts "
    "the subagent's current turn).",
    INTERJECT: (
        "Deliver a message to a subagent's running turn at its next model response, and get that response "
        "(response_disposition says whether it also started tool calls; the subagent goes on either way)."
    ),
    WAIT: "Wait for progress of the named subagents (all when omitted): returns their answers when a turn "
    "ends, or status 'still_working' after the long-poll duration; waiting never stops them.",
    LIST: "List this run's subagents, newest first, with their status and latest answer.",
}


class SubagentControlTool(Tool):
    """One control tool; the parent Agent's own step body executes its calls, never ``call``."""

    def call(self, input: Any) -> Any:
        raise ToolError(f"{self.tool_name} is executed by the agent's subagent manager")


def control_tool_classes(definitions: dict[str, Definition]) -> list[type[SubagentControlTool]]:
    """The five control tools for a run whose model may spawn ``definitions``."""
    kinds = "\n".join(f"- {kind}: {d.description}" for kind, d in definitions.items())
    classes = []
    for name, text in _DESCRIPTIONS.items():
        namespace = {
            "tool_name": name,
            "description": text.format(kinds=kinds),
            "input_schema": input_schema(name, tuple(definitions)),
        }
        classes.append(type(f"SubagentTool_{name}", (SubagentControlTool,), namespace))
    return classes


class SubagentControlTools:
    """The tool provider of an Agent that declares subagents: the control tools for its run."""

    @classmethod
    def tools(cls, binding: Binding) -> Any:
        agent = binding.agent
        options = getattr(type(agent), "_subagent_options", None)
        run = binding.run
        if options is None or run is None:
            return None
        return control_tool_classes(options.definitions(run.invocation))


__all__ = ["SubagentControlTool", "SubagentControlTools", "control_tool_classes"]
