"""Network policy enforcement for sandbox-launched processes.

These controls apply only to processes launched through a Sandbox, never to provider
requests or tool code in the worker. A proxy enforces an allowlist only because the
sandbox blocks every direct socket path; the two together are the boundary.
"""

from lg_core.network.allowlist_gateway import AllowlistGateway
from lg_core.network.external_gateway import ExternalGateway
from lg_core.network.gateway import Gateway

__all__ = ["AllowlistGateway", "ExternalGateway", "Gateway"]
