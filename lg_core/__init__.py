"""LittleGhost for Python: LLM agents whose runs are durable, resumable state machines.

    from lg_core import Agent, Tool

    class SupportAgent(Agent):
        model = "scripted:support-demo"
        tools = [HelpCenterLookupTool]

    run = SupportAgent.ask("Can I get a refund?")

The names below are the public API; a test pins them so it changes only on purpose.
Each is imported the first time it is used, so ``import lg_core`` stays cheap. The
package's layers (command line, entry points, runtime wiring, runs, settings, engine,
sessions, models, store) are mapped in docs/architecture.md.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from lg_core.errors import *  # noqa: F403 - the error hierarchy is public API
from lg_core.errors import __all__ as _error_names

if TYPE_CHECKING:
    from lg_core import callbacks
    from lg_core.agent import DEFAULT_LIMITS, Agent, AsyncRunStream
    from lg_core.agent_stream import AgentStreamSource, AgentStreamStep
    from lg_core.assemblies.assembly import Assembly
    from lg_core.assemblies.builder import AssemblyBuilder
    from lg_core.assemblies.declarations import edge, error_edge, member, node
    from lg_core.assemblies.definition import AssemblyDefinition
    from lg_core.assemblies.graph import Graph, GraphBuilder
    from lg_core.assemblies.swarm import Swarm, SwarmBuilder
    from lg_core.assemblies.workflow import Workflow, WorkflowBuilder
    from lg_core.callbacks import (
        after_initialize,
        after_invocation,
        after_model,
        after_model_error,
        after_tool,
        before_invocation,
        before_model,
        before_tool,
        cancel,
        replace,
    )
    from lg_core.cancellation import CancellationToken
    from lg_core.config import Configuration, configure, current_configuration, with_configuration
    from lg_core.content import Document, Image, Reasoning, Text, ToolResult, ToolUse
    from lg_core.datamap import DataMap
    from lg_core.engine.codec import register_error_class
    from lg_core.events import EVENT_TYPES, StreamEvent
    from lg_core.execution import Execution
    from lg_core.execution_state import ExecutionState
    from lg_core.hooks import Hook
    from lg_core.interjections import InterjectionResult
    from lg_core.invocation import Invocation
    from lg_core.messages import Message
    from lg_core.models import Model, ModelCapabilities, ModelRequest, ModelResolver, ModelResponse
    from lg_core.path_set import PathSet
    from lg_core.replay import fork, retry
    from lg_core.result_schema import ResultSchema, StructuredResult
    from lg_core.retention import PruneReport, prune_runs
    from lg_core.run import Run
    from lg_core.run_context import RunContext
    from lg_core.run_result import RunResult
    from lg_core.runtime import Runtime, current_runtime, model_resolver
    from lg_core.sandbox import Sandbox
    from lg_core.session import Session
    from lg_core.sessions import (
        FilesystemSessionStore,
        MemorySessionStore,
        SessionSnapshot,
        SessionStore,
        SqlSessionStore,
    )
    from lg_core.store import RunRecord
    from lg_core.subagents.declarations import agent_as_tool, agents_as_tools, assemblies_as_tools, assembly_as_tool
    from lg_core.tool import Artifact, Binding, Tool, ToolOutcome
    from lg_core.tool_registry import ToolRegistry
    from lg_core.trusted_path import TrustedPath
    from lg_core.usage import Usage
    from lg_core.workspace import Workspace

# Each lazily exported name and the module that defines it. ``import lg_core`` loads only the
# error hierarchy: the engine, the store (SQLAlchemy), the providers and pydantic load when a
# program first touches a name that needs them, so a command or worker pays for what it uses.
_EXPORTS: dict[str, str] = {
    **dict.fromkeys(("Agent", "AsyncRunStream", "DEFAULT_LIMITS"), "lg_core.agent"),
    **dict.fromkeys(("AgentStreamSource", "AgentStreamStep"), "lg_core.agent_stream"),
    "Assembly": "lg_core.assemblies.assembly",
    "AssemblyBuilder": "lg_core.assemblies.builder",
    **dict.fromkeys(("edge", "error_edge", "member", "node"), "lg_core.assemblies.declarations"),
    "AssemblyDefinition": "lg_core.assemblies.definition",
    **dict.fromkeys(("Graph", "GraphBuilder"), "lg_core.assemblies.graph"),
    **dict.fromkeys(("Swarm", "SwarmBuilder"), "lg_core.assemblies.swarm"),
    **dict.fromkeys(("Workflow", "WorkflowBuilder"), "lg_core.assemblies.workflow"),
    **dict.fromkeys(
        ("agent_as_tool", "agents_as_tools", "assemblies_as_tools", "assembly_as_tool"),
        "lg_core.subagents.declarations",
    ),
    **dict.fromkeys(
        (
            "after_initialize",
            "after_invocation",
            "after_model",
            "after_model_error",
            "after_tool",
            "before_invocation",
            "before_model",
            "before_tool",
            "cancel",
            "replace",
        ),
        "lg_core.callbacks",
    ),
    "CancellationToken": "lg_core.cancellation",
    **dict.fromkeys(
        ("Configuration", "configure", "current_configuration", "with_configuration"),
        "lg_core.config",
    ),
    **dict.fromkeys(("Document", "Image", "Reasoning", "Text", "ToolResult", "ToolUse"), "lg_core.content"),
    "DataMap": "lg_core.datamap",
    "register_error_class": "lg_core.engine.codec",
    **dict.fromkeys(("EVENT_TYPES", "StreamEvent"), "lg_core.events"),
    "Execution": "lg_core.execution",
    "Hook": "lg_core.hooks",
    "ExecutionState": "lg_core.execution_state",
    "InterjectionResult": "lg_core.interjections",
    "Invocation": "lg_core.invocation",
    "Message": "lg_core.messages",
    **dict.fromkeys(("Model", "ModelCapabilities", "ModelRequest", "ModelResolver", "ModelResponse"), "lg_core.models"),
    "PathSet": "lg_core.path_set",
    **dict.fromkeys(("fork", "retry"), "lg_core.replay"),
    **dict.fromkeys(("ResultSchema", "StructuredResult"), "lg_core.result_schema"),
    **dict.fromkeys(("PruneReport", "prune_runs"), "lg_core.retention"),
    "Run": "lg_core.run",
    "RunContext": "lg_core.run_context",
    "RunResult": "lg_core.run_result",
    **dict.fromkeys(("Runtime", "current_runtime", "model_resolver"), "lg_core.runtime"),
    "Session": "lg_core.session",
    **dict.fromkeys(
        (
            "FilesystemSessionStore",
            "MemorySessionStore",
            "SessionSnapshot",
            "SessionStore",
            "SqlSessionStore",
        ),
        "lg_core.sessions",
    ),
    "RunRecord": "lg_core.store",
    **dict.fromkeys(("Artifact", "Binding", "Tool", "ToolOutcome"), "lg_core.tool"),
    "Sandbox": "lg_core.sandbox",
    "ToolRegistry": "lg_core.tool_registry",
    "TrustedPath": "lg_core.trusted_path",
    "Usage": "lg_core.usage",
    "Workspace": "lg_core.workspace",
}
_SUBMODULES = ("callbacks",)  # public names that are modules of this package


def __getattr__(name: str) -> Any:
    """Load a public name's module on first use (PEP 562) and keep the name here."""
    if name in _SUBMODULES:
        value: Any = import_module(f"{__name__}.{name}")
    elif name in _EXPORTS:
        value = getattr(import_module(_EXPORTS[name]), name)
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


__version__ = "0.1.0"


def list_runs(status: str | None = None, limit: int = 100) -> list[RunRecord]:
    """Stored runs, newest first; ``status`` filters (pending, running, completed, failed, partial, cancelled)."""
    from lg_core.runtime import current_runtime

    return current_runtime().list_runs(status=status, limit=limit)


def get_run(run_id: str) -> Run:
    """The stored run ``run_id`` as a Run (finished or not)."""
    from lg_core.runtime import current_runtime

    return current_runtime().get_run(run_id)


def resume(run_id: str, *, force: bool = False, on_event: Any = None) -> Run:
    """Continue run ``run_id`` after its process died; committed steps are not redone.

    ``on_event`` receives each event of the resumed part as it happens.
    """
    from lg_core.runtime import current_runtime

    return current_runtime().resume(run_id, force=force, on_event=on_event)


def get_execution(run_id: str) -> Execution:
    """Re-attach to a background run from any process or request."""
    from lg_core.runtime import current_runtime

    return current_runtime().get_execution(run_id)


async def get_execution_async(run_id: str) -> Execution:
    """``get_execution`` for async code (the store lookup runs on a worker thread)."""
    import asyncio

    from lg_core.runtime import current_runtime

    return await asyncio.to_thread(lambda: current_runtime().get_execution(run_id))


def cancel_run(run_id: str) -> bool:
    """Ask the process running ``run_id`` to stop it; True if the run had not finished (running or pending)."""
    from lg_core.runtime import current_runtime

    return current_runtime().cancel(run_id)


__all__ = [
    "Agent",
    "AgentStreamSource",
    "AgentStreamStep",
    "Artifact",
    "Assembly",
    "AssemblyBuilder",
    "AssemblyDefinition",
    "AsyncRunStream",
    "Binding",
    "CancellationToken",
    "Configuration",
    "DEFAULT_LIMITS",
    "DataMap",
    "Document",
    "EVENT_TYPES",
    "Execution",
    "ExecutionState",
    "InterjectionResult",
    "FilesystemSessionStore",
    "Graph",
    "GraphBuilder",
    "Hook",
    "Image",
    "Invocation",
    "MemorySessionStore",
    "Message",
    "Model",
    "ModelCapabilities",
    "ModelRequest",
    "ModelResolver",
    "ModelResponse",
    "PathSet",
    "PruneReport",
    "Reasoning",
    "ResultSchema",
    "Run",
    "RunContext",
    "RunRecord",
    "RunResult",
    "Runtime",
    "Sandbox",
    "Session",
    "SessionSnapshot",
    "SessionStore",
    "SqlSessionStore",
    "StreamEvent",
    "StructuredResult",
    "Swarm",
    "SwarmBuilder",
    "Text",
    "Tool",
    "ToolOutcome",
    "ToolRegistry",
    "ToolResult",
    "ToolUse",
    "TrustedPath",
    "Usage",
    "Workflow",
    "WorkflowBuilder",
    "Workspace",
    "after_initialize",
    "after_invocation",
    "after_model",
    "after_model_error",
    "after_tool",
    "agent_as_tool",
    "agents_as_tools",
    "assemblies_as_tools",
    "assembly_as_tool",
    "before_invocation",
    "before_model",
    "before_tool",
    "callbacks",
    "cancel",
    "cancel_run",
    "configure",
    "current_configuration",
    "current_runtime",
    "edge",
    "error_edge",
    "fork",
    "get_execution",
    "get_execution_async",
    "get_run",
    "list_runs",
    "member",
    "model_resolver",
    "node",
    "prune_runs",
    "register_error_class",
    "replace",
    "resume",
    "retry",
    "with_configuration",
    *_error_names,
]
