"""How a process start is described to a backend, and the checks that build that description.

The Sandbox turns a call into a LaunchRequest (an argument vector, the granted
directories, the network, the child's environment and working directory, the
limits); the backend turns that into a Launch, the host command line that confines
it. The child's environment is built here in one place so every backend gives the
same one: the host's only when the policy and the call both opt in, otherwise
``PATH`` alone, then the policy's values, the call's, and the Workspace's variables.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from lg_core.errors import PolicyError
from lg_core.sandbox.environment_policy import checked_variables
from lg_core.sandbox.limits import Limits
from lg_core.sandbox.network_policy import NetworkPolicy
from lg_core.sandbox.policy import Grant, Policy
from lg_core.workspace import Workspace

DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"


@dataclass(frozen=True)
class LaunchRequest:
    """Everything a backend needs to start one confined command."""

    command: tuple[str, ...]
    grants: tuple[Grant, ...]
    network: NetworkPolicy
    environment: Mapping[str, str]
    cwd: str
    limits: Limits
    allow_subprocesses: bool


@dataclass(frozen=True)
class Launch:
    """The host-side command line a backend built, and how to start it."""

    argv: tuple[str, ...]
    environment: Mapping[str, str]
    cwd: str
    user: int | None = None
    group: int | None = None


def child_environment(
    policy: Policy, workspace: Workspace, environment: Mapping[str, Any] | None, inherit: bool
) -> dict[str, str]:
    """The environment a child starts with (see the module docstring)."""
    if inherit and not policy.environment.inherit:
        raise PolicyError("the call asks to inherit the host environment, but the sandbox policy does not allow it")
    values: dict[str, str] = dict(os.environ) if inherit else {"PATH": DEFAULT_PATH}
    values.update(policy.environment.values)
    values.update(checked_variables(environment or {}, "child environment"))
    values.update(workspace.environment())
    return values


def working_directory(workspace: Workspace, cwd: str | None, grants: Sequence[Grant]) -> str:
    """The physical directory a child starts in: the root, or a logical path inside a granted one."""
    if cwd is None:
        directory = workspace.real_path("root")
    elif os.path.isabs(cwd):
        raise ValueError(f"cwd {cwd!r} is a physical path; use a root-relative path or workspace://name/path")
    else:
        directory = workspace.resolve(cwd)
    if not any(directory == g.path or directory.startswith(g.path.rstrip(os.sep) + os.sep) for g in grants):
        raise PolicyError(f"the working directory {cwd or 'root'!r} is not inside a path granted to the child")
    return directory


def argument_vector(command: Any) -> tuple[str, ...]:
    """``command`` as a tuple of strings: one argv, never a shell string."""
    if isinstance(command, str | bytes) or not isinstance(command, Sequence) or not command:
        raise ValueError(f"a command must be a non-empty list of arguments, got {command!r}")
    for argument in command:
        if not isinstance(argument, str) or "\0" in argument:
            raise ValueError(f"command arguments must be strings without NUL bytes, got {argument!r}")
    return tuple(command)


def narrowed_output(requested: Any, ceiling: int) -> int:
    """A call's output bound, which may only tighten the sandbox's."""
    if requested is None:
        return ceiling
    if isinstance(requested, bool) or not isinstance(requested, int) or requested <= 0:
        raise ValueError(f"an output bound must be a positive number of bytes, got {requested!r}")
    return min(requested, ceiling)
