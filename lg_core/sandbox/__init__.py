"""Sandbox: policy, scopes and owned child processes for the files and programs of a Run.

    from lg_core.sandbox import Sandbox
    from lg_core.workspace import Workspace

    workspace = Workspace(root=run_dir, paths={"source": "/srv/source"}).open()
    sandbox = Sandbox.resolve_provider("native")(
        workspace=workspace,
        policy={"files": {"root": "read_write", "source": "read_only"}, "network": "none"},
    ).open()
    result = sandbox.execute_program(["python3", "-c", "print(1)"], timeout=10)

The backends live in :mod:`lg_core.sandboxes`. This package imports nothing from runs,
the engine or the store: it is a low layer the tools and code mode build on.
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
