"""The ``workspace`` and ``sandbox`` settings, and the pair a run's step opens from them.

A durable run's steps may execute on different workers, and any step may be
executed again after a crash, so nothing of a workspace is kept in memory between
steps. Each step that uses them builds the Workspace and Sandbox again from the
settings, opens the workspace (its identity checks run again), then the sandbox,
and closes the sandbox before the workspace on every outcome. What carries a
run's files from one step to the next is the workspace root itself: a host path
that every worker of the queue can reach (a shared volume), named per run with
``{run_id}`` in a mapping declaration or by a factory that returns the same root
for the same run id.

Declarations:

* ``workspace``: ``{"provider": "directory", "root": "/srv/lg/runs/{run_id}", "paths": {...},
  "setup": callable}``, a factory ``(run_id=..., invocation=...) -> Workspace``, or its
  ``'module:function'`` path. A teardown callback is refused: no single process sees
  a durable run end, so nothing could call it once, at the end, as it promises.
  ``setup`` runs each time a step opens the workspace, so it must be idempotent.
* ``sandbox``: a backend name (``"bubblewrap"``), ``{"provider": ..., <policy keys>,
  "limits": ...}``, a factory ``(workspace=...) -> Sandbox``, or its ``'module:function'``
  path. A sandbox needs a configured workspace: the current directory of whichever
  worker runs a step is no place for a run's files.

A mapping may also be given as JSON text, as an ``LG_WORKSPACE`` or ``LG_SANDBOX``
variable holds it. A run id never holds a ``/`` (lg_core.run_ids), so ``{run_id}``
names one directory.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from lg_core.errors import CleanupError, ConfigurationError, SandboxConfigurationError
from lg_core.import_path import import_callable
from lg_core.sandbox.limits import Limits
from lg_core.sandbox.policy import POLICY_KEYS, Policy
from lg_core.sandbox.sandbox import Sandbox
from lg_core.workspace import Workspace

RUN_ID_FIELD = "{run_id}"


@dataclass(frozen=True)
class RunResources:
    """The workspace and sandbox one step works with; either may be None when not configured."""

    workspace: Workspace | None = None
    sandbox: Sandbox | None = None


NO_RESOURCES = RunResources()


# -- settings ------------------------------------------------------------------------------


def checked_workspace_setting(value: Any) -> Any:
    """The ``workspace`` setting as stored: None, a mapping checked now, or a factory."""
    value = _decoded(value, "workspace")
    if value is None or (callable(value) and not isinstance(value, Mapping)):
        return value
    if isinstance(value, str):
        return import_callable(value, "workspace")
    if not isinstance(value, Mapping):
        raise ValueError(f"workspace must be a mapping, a factory or 'module:function', got {type(value).__name__}")
    options = dict(value)
    if options.get("teardown") is not None:
        raise ValueError(
            "workspace teardown is not supported: a durable run's steps run on many workers and no single one "
            "sees the run end; remove the run's files with your own retention job instead"
        )
    root = options.get("root")
    if not isinstance(root, str) or not os.path.isabs(os.path.expanduser(root)):
        raise ValueError(
            "workspace needs an absolute 'root' every worker reaches, e.g. '/srv/lg/runs/{run_id}' "
            f"(a relative root would mean a different directory on each worker), got {root!r}"
        )
    if isinstance(options.get("setup"), str):
        options["setup"] = import_callable(options["setup"], "workspace setup")
    _workspace_from_mapping(dict(options), "settings-check")  # a bad provider, name or path fails here
    return options


def checked_sandbox_setting(value: Any) -> Any:
    """The ``sandbox`` setting as stored: None, a backend name or mapping checked now, or a factory."""
    value = _decoded(value, "sandbox")
    if value is None or (callable(value) and not isinstance(value, Mapping)):
        return value
    if isinstance(value, str):
        if ":" in value:
            return import_callable(value, "sandbox")
        value = {"provider": value}
    if not isinstance(value, Mapping):
        raise ValueError(f"sandbox must be a backend name, a mapping or a factory, got {type(value).__name__}")
    options = dict(value)
    try:
        Sandbox.resolve_provider(options.get("provider", "native"))
        # A misspelt access mode, network or limit fails here rather than in every tool call.
        Policy.coerce({key: options[key] for key in POLICY_KEYS if key in options})
        Limits.coerce(options.get("limits"))
    except (SandboxConfigurationError, TypeError, ValueError) as error:
        raise ValueError(str(error)) from None
    return options


def _decoded(value: Any, setting: str) -> Any:
    """A mapping written as JSON text (``LG_WORKSPACE='{"root": ...}'``), decoded; anything else as is."""
    if not isinstance(value, str) or not value.lstrip().startswith("{"):
        return value
    try:
        return json.loads(value)
    except json.JSONDecodeError as error:
        raise ValueError(f"{setting} is not valid JSON: {error}") from None


# -- building and opening ------------------------------------------------------------------


def build_resources(workspace_setting: Any, sandbox_setting: Any, run_id: str, invocation: Any = None) -> RunResources:
    """The unopened workspace and sandbox the settings declare for ``run_id``."""
    if workspace_setting is None:
        if sandbox_setting is not None:
            raise ConfigurationError(
                "the sandbox setting needs a workspace setting: a root every worker reaches, where the run's "
                "files live between steps"
            )
        return NO_RESOURCES
    workspace = _build_workspace(workspace_setting, run_id, invocation)
    if sandbox_setting is None:
        return RunResources(workspace=workspace)
    return RunResources(workspace=workspace, sandbox=build_sandbox(sandbox_setting, workspace))


@contextlib.contextmanager
def opened(resources: RunResources, run: Any = None) -> Iterator[RunResources]:
    """Open the workspace, then the sandbox; close the sandbox, then the workspace, on every outcome.

    A failure to close is a CleanupError (the step cannot promise it left nothing
    behind), raised even when the body raised first (that error is its context):
    the workspace is still closed after a sandbox that failed to.
    """
    with contextlib.ExitStack() as stack:
        stack.callback(_close, resources, run)
        if resources.workspace is not None:
            resources.workspace.open(run)
        if resources.sandbox is not None:
            resources.sandbox.open(run)
        yield resources


def _close(resources: RunResources, run: Any) -> None:
    closers: list[Callable[[], None]] = []
    if resources.sandbox is not None:
        closers.append(resources.sandbox.close)
    if resources.workspace is not None:
        closers.append(functools.partial(resources.workspace.close, run))
    first: BaseException | None = None
    for close in closers:
        try:
            close()
        except Exception as error:  # noqa: BLE001 - the workspace closes even when the sandbox failed to
            first = first or error
    if first is not None:
        raise CleanupError(f"the run's sandbox or workspace failed to close: {type(first).__name__}") from first


def _build_workspace(setting: Any, run_id: str, invocation: Any) -> Workspace:
    if isinstance(setting, Mapping):
        return _workspace_from_mapping(dict(setting), run_id)
    workspace = setting(run_id=run_id, invocation=invocation)
    if not isinstance(workspace, Workspace):
        raise ConfigurationError(f"the workspace factory must return a Workspace, got {type(workspace).__name__}")
    if workspace.has_teardown:
        raise ConfigurationError(
            "the workspace factory returned a Workspace with a teardown callback, which a durable run cannot "
            "honour: no single process sees the run end; remove the run's files with your own retention job"
        )
    return workspace


def _workspace_from_mapping(options: dict[str, Any], run_id: str) -> Workspace:
    options["root"] = str(options["root"]).replace(RUN_ID_FIELD, run_id)
    try:
        return Workspace.from_settings(options)
    except (KeyError, TypeError, ValueError) as error:
        raise ValueError(f"invalid workspace setting: {str(error).strip(chr(39))}") from None


def build_sandbox(setting: Any, workspace: Workspace) -> Sandbox:
    """The unopened Sandbox ``setting`` declares around ``workspace``."""
    if isinstance(setting, Mapping):
        return Sandbox.from_settings(workspace, setting)
    sandbox = setting(workspace=workspace)
    if not isinstance(sandbox, Sandbox) or sandbox.workspace is not workspace:
        raise ConfigurationError("the sandbox factory must return a Sandbox built on the workspace it was given")
    return sandbox


__all__ = [
    "NO_RESOURCES",
    "RunResources",
    "build_resources",
    "build_sandbox",
    "checked_sandbox_setting",
    "checked_workspace_setting",
    "opened",
]
