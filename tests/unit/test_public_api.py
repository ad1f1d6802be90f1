"""The public API is lg_core's ``__all__``; this test pins it so it changes only on purpose.

When you add, rename or remove a public name, update PUBLIC_NAMES here in the same change.
"""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

import lg_core

PUBLIC_NAMES = [
    "AbstractMethodError",
    "AdapterLoadError",
    "Agent",
    "AgentInterjectionError",
    "AgentStreamSource",
    "AgentStreamStep",
    "Artifact",
    "Assembly",
    "AssemblyBuilder",
    "AssemblyDefinition",
    "AssemblyError",
    "AssemblyLimitError",
    "AssemblyRoutingError",
    "AssemblyStepTimeoutError",
    "AsyncRunStream",
    "Binding",
    "CancellationToken",
    "CancelledError",
    "CapabilityError",
    "CleanupError",
    "Configuration",
    "ConfigurationError",
    "ContextWindowOverflowError",
    "CredentialError",
    "DEFAULT_LIMITS",
    "DataMap",
    "DeadlineExceededError",
    "DependencyError",
    "Document",
    "EVENT_TYPES",
    "Error",
    "Execution",
    "ExecutionState",
    "FilesystemSessionStore",
    "Graph",
    "GraphBuilder",
    "HTTPError",
    "Hook",
    "Image",
    "InterjectionResult",
    "InvalidPromptTemplateError",
    "Invocation",
    "InvocationError",
    "MalformedToolCallError",
    "MemorySessionStore",
    "Message",
    "MissingPromptLocalError",
    "MissingPromptTemplateError",
    "Model",
    "ModelCapabilities",
    "ModelRequest",
    "ModelResolver",
    "ModelResponse",
    "OutputLimitError",
    "PathSet",
    "PolicyError",
    "PromptTemplateError",
    "ProtocolError",
    "ProviderError",
    "PruneReport",
    "Reasoning",
    "ReplayDivergenceError",
    "ResultSchema",
    "Run",
    "RunContext",
    "RunNotFoundError",
    "RunRecord",
    "RunResult",
    "RunStateError",
    "Runtime",
    "Sandbox",
    "SandboxConfigurationError",
    "SandboxLimitError",
    "Session",
    "SessionActorError",
    "SessionSnapshot",
    "SessionStore",
    "SqlSessionStore",
    "StoreUnavailableError",
    "StreamEvent",
    "StructuredResult",
    "StructuredResultError",
    "Swarm",
    "SwarmBuilder",
    "Text",
    "Tool",
    "ToolError",
    "ToolLoopError",
    "ToolOutcome",
    "ToolRegistry",
    "ToolResult",
    "ToolUse",
    "TrustedPath",
    "UnsupportedInputError",
    "UnsupportedPlatformError",
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
]


def test_all_is_pinned():
    assert sorted(lg_core.__all__) == PUBLIC_NAMES


def test_all_has_no_duplicates():
    assert len(lg_core.__all__) == len(set(lg_core.__all__))


def test_no_two_public_names_differ_only_by_case():
    """``runtime`` beside ``Runtime`` reads as one name; a reader (and a case-insensitive
    search) cannot tell a function from the class it returns."""
    folded: dict[str, list[str]] = {}
    for name in lg_core.__all__:
        folded.setdefault(name.casefold(), []).append(name)
    assert [names for names in folded.values() if len(names) > 1] == []


@pytest.mark.parametrize("name", PUBLIC_NAMES)
def test_every_public_name_is_importable(name):
    module = importlib.import_module("lg_core")
    assert getattr(module, name) is not None
    namespace: dict = {}
    exec(f"from lg_core import {name}", namespace)  # noqa: S102 - the import statement users write
    assert namespace[name] is getattr(lg_core, name)


def test_star_import_exports_exactly_the_public_names():
    namespace: dict = {}
    exec("from lg_core import *", namespace)  # noqa: S102
    exported = sorted(name for name in namespace if name != "__builtins__")
    assert exported == PUBLIC_NAMES


def test_error_classes_are_all_exported():
    from lg_core import errors

    assert set(errors.__all__) <= set(lg_core.__all__)


def test_version_is_a_string():
    assert isinstance(lg_core.__version__, str) and lg_core.__version__


def test_importing_lg_core_has_no_side_effects():
    """Import builds no runtime and pulls in no broker client (no import-time singletons)."""
    code = (
        "import sys, lg_core, lg_core.config as c; "
        "assert c._default is None, 'a configuration was built at import'; "
        "bad = sorted(m for m in ('celery', 'redis', 'kombu') if m in sys.modules); "
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_an_entrypoint_that_cannot_be_imported_says_how_workers_get_it():
    from lg_core.errors import RunStateError
    from lg_core.run import import_entrypoint

    with pytest.raises(
        RunStateError, match=r"lg worker --import myapp\.missing_agents` \(or LG_IMPORTS=myapp\.missing_agents\)"
    ):
        import_entrypoint("myapp.missing_agents:SupportAgent")


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgresql+psycopg://lg:pw@db/lg", "postgresql+psycopg://lg:***@db/lg"),
        ("redis://:secret@h:6379/1", "redis://:***@h:6379/1"),
        ("redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0"),
        ("not a url://u:pw@h", "not a url://u:***@h"),  # SQLAlchemy cannot parse it: still masked
    ],
)
def test_urls_in_messages_never_show_a_password(url, shown):
    from lg_core.urls import safe_url

    assert safe_url(url) == shown


def test_an_entrypoint_stack_workers_cannot_import_says_where_they_import_code_from(monkeypatch, tmp_path):
    """`lg stack`'s workers are started by `lg stack up`, so `lg worker --import` cannot help them."""
    from lg_core.errors import RunStateError
    from lg_core.run import STACK_DIR_VARIABLE, import_entrypoint

    monkeypatch.setenv(STACK_DIR_VARIABLE, str(tmp_path / "stack"))
    with pytest.raises(RunStateError) as raised:
        import_entrypoint("myapp.missing_agents:SupportAgent")
    message = str(raised.value)
    assert "import application code from the directory `lg stack up` ran in" in message
    assert "or PYTHONPATH" in message and f"lg stack down --dir {tmp_path / 'stack'}" in message
    assert "lg worker --import" not in message
