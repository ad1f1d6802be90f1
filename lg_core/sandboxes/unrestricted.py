"""Unrestricted: commands run directly on the host, for trusted work only.

This backend is an explicit opt-in and never a fallback: it is not a security
boundary. A command runs with the worker's own authority, from the Workspace root,
with an empty environment unless policy and call both opt in to inheriting, its
output bounded and its process group ended at close. Its effective policy reports
what it really does: the whole host filesystem is reachable and the network is the
host's. A policy asking for no network is refused rather than silently ignored,
and so are a process-count limit (RLIMIT_NPROC would count every process of the
worker's user) and a request to deny subprocesses.
"""

from __future__ import annotations

import sys
from typing import Any

from lg_core.errors import CapabilityError
from lg_core.sandbox import capabilities as features
from lg_core.sandbox.capabilities import Capabilities
from lg_core.sandbox.launch import Launch, LaunchRequest
from lg_core.sandbox.network_policy import NetworkPolicy
from lg_core.sandbox.policy import Policy
from lg_core.sandbox.probe_report import ProbeReport
from lg_core.sandbox.process_session import prlimit_executable
from lg_core.sandbox.sandbox import Sandbox


class Unrestricted(Sandbox):
    """A host-backed sandbox for trusted local work (see the module docstring)."""

    name = "unrestricted"

    @classmethod
    def backend_capabilities(cls) -> Capabilities:
        limits = [features.MEMORY_LIMIT] if sys.platform.startswith("linux") else []
        if prlimit_executable() is not None:
            limits += [features.CPU_LIMIT, features.FILE_SIZE_LIMIT]
        return Capabilities(features=(*features.DEFAULT_FEATURES, *limits), network_modes=("inherit",))

    def _enforceable(self, policy: Policy) -> Policy:
        if policy.network is not None and not policy.network.inherit:
            raise CapabilityError(
                f"the unrestricted backend cannot enforce network {policy.network.mode!r}: "
                "its commands use the host network; choose an isolating backend"
            )
        return policy.with_changes(root_filesystem="read_write", network=NetworkPolicy("inherit"))

    def _launch(self, request: LaunchRequest) -> Launch:
        if not request.network.inherit:
            raise CapabilityError(
                f"the unrestricted backend cannot enforce network {request.network.mode!r} for a scope: "
                "its commands use the host network"
            )
        return Launch(request.command, request.environment, request.cwd)

    @classmethod
    def probe_host(cls, **options: Any) -> ProbeReport:
        details = {"isolation": "none: commands run with the worker's authority"}
        return ProbeReport(cls.name, True, None, cls.backend_capabilities(), details)
