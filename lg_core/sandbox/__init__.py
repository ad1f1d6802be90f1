"""Sandbox: policy, scopes and owned child processes for the files and programs of a Run.

    from lg_core.sandbox import Sandbox
    from lg_core.workspace import Workspace

    workspace = Workspace(root=run_dir, paths={"source": "/srv/source"}).open()
    sandbox = Sandbox.resolve_provider("native")(
        workspace=workspace,
        policy={"files": {"root": "read_write", "source": "read_only"}, "network": "none"},
    ).open()
    result = sandbox.execute_program(["python3", "-c", "print(1)"], timeout=10)

The backends live in :mod:`lg_core.sandboxes`, network gateways in :mod:`lg_core.network`.
This package imports nothing from runs, the engine or the store: it is a low layer the
tools and code mode build on.

    sandbox.py             Sandbox: backend registry and probing, policy, scopes, files, process starts
    policy.py              Policy, Grant: granted paths (nested: most restrictive wins), root filesystem
    environment_policy.py  EnvironmentPolicy: inheriting the host environment, explicit values
    network_policy.py      NetworkPolicy: none, inherit, allowlist endpoints
    limits.py              Limits: file-operation sizes, output, CPU, memory, file size, processes
    capabilities.py        Capabilities and the feature names backends report
    scope.py               Scope: a view that can only narrow its sandbox
    launch.py              LaunchRequest and Launch: a process start as a backend receives it
    process_session.py     ProcessSession: an owned child in its own process group, bounded I/O, limits
    execution.py           Execution: the result of a program run to completion
    probe_report.py        ProbeReport: what probing a backend found
    run_resources.py       the workspace and sandbox settings, and the pair each step of a run opens from them
    _file_operations.py    read, write, replace, list: logical paths, no symlink followed
    _output_pump.py        bounded capture of a child's stdout and stderr on one thread
    _memory_guard.py       the sampled memory limit
"""

from lg_core.sandbox.capabilities import Capabilities
from lg_core.sandbox.environment_policy import EnvironmentPolicy
from lg_core.sandbox.execution import Execution
from lg_core.sandbox.launch import Launch, LaunchRequest
from lg_core.sandbox.limits import Limits
from lg_core.sandbox.network_policy import NetworkPolicy
from lg_core.sandbox.policy import Grant, Policy
from lg_core.sandbox.probe_report import ProbeReport
from lg_core.sandbox.process_session import ProcessSession
from lg_core.sandbox.sandbox import Sandbox
from lg_core.sandbox.scope import Scope

probe = Sandbox.probe

__all__ = [
    "Capabilities",
    "EnvironmentPolicy",
    "Execution",
    "Grant",
    "Launch",
    "LaunchRequest",
    "Limits",
    "NetworkPolicy",
    "Policy",
    "ProbeReport",
    "ProcessSession",
    "Sandbox",
    "Scope",
    "probe",
]
