"""Building the Run of an assembly call: the request checked, what is not supported yet refused.

An assembly answers through the Agent's calling style (``ask``, ``stream_ask``,
``start_execution`` and their async forms) on the same Run and engine, with a
session (``session_id``, ``actor_id``) as an Agent's run has one. What a
Graph or Swarm run cannot honour yet is refused here, before a Run exists, with an error
naming it: silently dropping a model override would hand the caller a different run than they
asked for.
"""

from __future__ import annotations

from typing import Any

from lg_core._agent_calls import runtime_for
from lg_core.assemblies.swarm_handoffs import HANDOFF_TOOL_NAME
from lg_core.errors import ConfigurationError, InvocationError
from lg_core.invocation import Invocation
from lg_core.run import Run, prepared_by

_RUN_OPTIONS = ("runtime", "on_event", "cancellation_token")
_RUNNABLE_KINDS = ("graph", "swarm", "workflow")
# Invocation fields an assembly run does not carry, and why.
_UNSUPPORTED_FIELDS = {
    "model_override": "an assembly has no model of its own; declare models on its Agents",
}


def build_assembly_run(cls: Any, message: Any, options: dict[str, Any], definition: Any = None) -> Run:
    """Validate the request and build a dormant Run of assembly ``cls`` (raises before a Run exists).

    ``definition`` is a builder's AssemblyDefinition (``cls`` its implementation class), which the
    run carries as ``assembly_definition`` and stores with its frame; None runs the class's own."""
    owner = cls.__qualname__ if definition is None else f"{definition.kind} {definition.assembly_id}"
    if definition is None:
        definition = cls.definition()  # ConfigurationError for an abstract base, naming what it lacks
        carried = None
    else:
        try:
            definition.to_dict()  # stored with the run: a lambda no worker or resumed run could find is refused now
        except ConfigurationError as exc:
            raise ConfigurationError(
                f"{owner}: a run stores its definition so that workers and a resumed run read it back; {exc}"
            ) from None
        carried = definition
    if definition.kind not in _RUNNABLE_KINDS:
        raise ConfigurationError(f"{owner}: a {definition.kind} cannot run")
    if definition.kind == "swarm":
        _refuse_unsupported_members(owner, definition.spec)
    for name, why in _UNSUPPORTED_FIELDS.items():
        if options.get(name) is not None:
            raise InvocationError(f"{owner}.ask does not accept {name}: {why}")
    run_options = {name: options.pop(name) for name in _RUN_OPTIONS if name in options}
    runtime = runtime_for(run_options.get("runtime"))
    invocation = Invocation(**options) if message is None else Invocation.coerce(message, **options)
    invocation.check_storable()
    run = Run(
        cls,
        invocation,
        runtime,
        cancellation_token=run_options.get("cancellation_token"),
        on_event=run_options.get("on_event"),
    )
    run.assembly_definition = carried
    return prepared_by(run, runtime.hooks)


def _refuse_unsupported_members(owner: str, spec: Any) -> None:
    """Member options a Swarm run does not honour: a member's own tool named like the handoff tool it is offered."""
    for item in spec.members:
        own_names = {getattr(tool, "tool_name", None) for tool in getattr(item.agent, "tools", ())}
        if item.name in spec.handoffs and HANDOFF_TOOL_NAME in own_names:
            raise ConfigurationError(
                f"{owner}: member {item.name} has a tool named {HANDOFF_TOOL_NAME!r}, the name of the "
                "handoff tool the Swarm offers it; rename the member's tool"
            )


__all__ = ["build_assembly_run"]
