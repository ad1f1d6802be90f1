"""LittleGhost for Python: LLM agents whose runs are durable, resumable state machines.

    from lg_core import Agent, Tool

    class SupportAgent(Agent):
        model = "scripted:support-demo"
        tools = [HelpCenterLookupTool]

    run = SupportAgent.ask("Can I get a refund?")

The names below are the public API; a test pins them so it changes only on purpose.
"""

from __future__ import annotations

import asyncio
from typing import Any

from lg_core import callbacks
from lg_core.agent import DEFAULT_LIMITS, Agent, AsyncRunStream
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
from lg_core.errors import *  # noqa: F403 - the error hierarchy is public API
from lg_core.errors import __all__ as _error_names
from lg_core.events import EVENT_TYPES, StreamEvent
from lg_core.execution import Execution
from lg_core.execution_state import ExecutionState
from lg_core.hooks import Hook
from lg_core.interjections import InterjectionResult
from lg_core.invocation import Invocation
from lg_core.messages import Message
from lg_core.models import Model, ModelCapabilities, ModelRequest, ModelResolver, ModelResponse
from lg_core.replay import fork, retry
from lg_core.result_schema import ResultSchema, StructuredResult
from lg_core.retention import PruneReport, prune_runs
from lg_core.run import Run
from lg_core.run_context import RunContext
from lg_core.run_result import RunResult
from lg_core.runtime import Runtime, current_runtime, model_resolver
from lg_core.session import Session
from lg_core.sessions import (
    FilesystemSessionStore,
    MemorySessionStore,
    SessionSnapshot,
    SessionStore,
    SqlSessionStore,
)
from lg_core.store import RunRecord
from lg_core.tool import Artifact, Binding, Tool, ToolOutcome
from lg_core.tool_registry import ToolRegistry
from lg_core.usage import Usage

__version__ = "0.1.0"


def list_runs(status: str | None = None, limit: int = 100) -> list[RunRecord]:
    """Stored runs, newest first; ``status`` filters (pending, running, completed, failed, partial, cancelled)."""
    return current_runtime().list_runs(status=status, limit=limit)


def get_run(run_id: str) -> Run:
    """The stored run ``run_id`` as a Run (finished or not)."""
    return current_runtime().get_run(run_id)


def resume(run_id: str, *, force: bool = False, on_event: Any = None) -> Run:
    """Continue run ``run_id`` after its process died; committed steps are not redone.

    ``on_event`` receives each event of the resumed part as it happens.
    """
    return current_runtime().resume(run_id, force=force, on_event=on_event)


def get_execution(run_id: str) -> Execution:
    """Re-attach to a background run from any process or request."""
    return current_runtime().get_execution(run_id)


async def get_execution_async(run_id: str) -> Execution:
    """``get_execution`` for async code (the store lookup runs on a worker thread)."""
    return await asyncio.to_thread(lambda: current_runtime().get_execution(run_id))


def cancel_run(run_id: str) -> bool:
    """Ask the process running ``run_id`` to stop it; True if the run had not finished (running or pending)."""
    return current_runtime().cancel(run_id)


__all__ = [
    "Agent",
    "Artifact",
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
    "PruneReport",
    "Reasoning",
    "ResultSchema",
    "Run",
    "RunContext",
    "RunRecord",
    "RunResult",
    "Runtime",
    "Session",
    "SessionSnapshot",
    "SessionStore",
    "SqlSessionStore",
    "StreamEvent",
    "StructuredResult",
    "Text",
    "Tool",
    "ToolOutcome",
    "ToolRegistry",
    "ToolResult",
    "ToolUse",
    "Usage",
    "after_initialize",
    "after_invocation",
    "after_model",
    "after_model_error",
    "after_tool",
    "before_invocation",
    "before_model",
    "before_tool",
    "callbacks",
    "cancel",
    "cancel_run",
    "configure",
    "current_configuration",
    "current_runtime",
    "fork",
    "get_execution",
    "get_execution_async",
    "get_run",
    "list_runs",
    "model_resolver",
    "prune_runs",
    "register_error_class",
    "replace",
    "resume",
    "retry",
    "with_configuration",
    *_error_names,
]
