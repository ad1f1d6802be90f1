"""An Agent class with a delegation's ``model=``/``tools=`` overrides, importable by path on any worker.

``agent_as_tool(ResearchAgent, model=..., tools=[...])`` and
``subagent(ResearchAgent, kind=..., model=..., tools=[...])`` delegate to an Agent
with another model or tool list than its class declares. The delegated run is a
child run that any worker may continue, and a worker rebuilds a run's Agent from
its class's import path, so the override cannot live in memory: it becomes a
subclass of the delegate holding the overrides, kept as an attribute of the
declaring class (``Owner._lg_agent_<name>``, ``Owner._lg_subagent_<kind>``) and
so importable as ``module:Owner.attribute`` like any entrypoint.

Overridden tools replace the delegate's rather than adding to them: the spec says
a delegated agent receives only its own declared tools, or the override's.
"""

from __future__ import annotations

from typing import Any

from lg_core.errors import ConfigurationError


def agent_with_overrides(
    owner: type, agent_class: type, attribute: str, label: str, *, model: Any, tools: tuple[type, ...] | None
) -> type:
    """``agent_class`` itself without overrides, else its subclass holding them, set as ``owner.<attribute>``.

    ``label`` names the declaration in errors (``tool 'classify'``, ``subagent 'research'``).
    The subclass keeps the delegate's ``agent_id`` and description, so its runs and events
    name the agent the application declared. Building it again for the same declaration (a
    subclass of ``owner`` merging the tools ``owner`` declares) replaces an equal class.
    """
    if model is None and tools is None:
        return agent_class
    namespace: dict[str, Any] = {
        "__module__": owner.__module__,
        "__qualname__": f"{owner.__qualname__}.{attribute}",
        "agent_id": agent_class.agent_id,  # type: ignore[attr-defined]
        "description": agent_class.description,  # type: ignore[attr-defined]
    }
    if model is not None:
        namespace["model"] = model
    delegate = type(agent_class.__name__, (agent_class,), namespace)
    if tools is not None:
        _check_unique_names(tools, label)
        delegate.tools = tuple(tools)  # type: ignore[attr-defined]  # replacing, not adding to, the inherited ones
    setattr(owner, attribute, delegate)
    return delegate


def override_attribute(what: str, name: str) -> str:
    """The attribute of the declaring class a generated class is reachable by: ``_lg_<what>_<name>``."""
    return f"_lg_{what}_{name.replace('-', '_')}"


def _check_unique_names(tools: tuple[type, ...], label: str) -> None:
    seen: dict[str, type] = {}
    for tool in tools:
        tool_name = tool.tool_name  # type: ignore[attr-defined]  # Tool classes (checked by the declaration)
        earlier = seen.setdefault(tool_name, tool)
        if earlier is not tool:
            raise ConfigurationError(
                f"{label}: the tools= override has two tools named {tool_name!r} "
                f"({earlier.__qualname__} and {tool.__qualname__}); set tool_name on one of them"
            )


__all__ = ["agent_with_overrides", "override_attribute"]
