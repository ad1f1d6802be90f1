"""Network policy enforcement for sandbox-launched processes.

These controls apply only to processes launched through a Sandbox, never to provider
requests or tool code in the worker. A proxy enforces an allowlist only because the
sandbox blocks every direct socket path; the two together are the boundary.

    gateway.py            Gateway: the lifecycle a gateway implements
    allowlist_gateway.py  AllowlistGateway: the enforcing proxy a sandbox starts, on a Unix socket
    external_gateway.py   ExternalGateway: an application's own proxy, in granted runtime paths
    _bridge.py            runs inside a sandbox: loopback port to gateway socket, then the command
"""

from lg_core.network.allowlist_gateway import AllowlistGateway
from lg_core.network.external_gateway import ExternalGateway
from lg_core.network.gateway import Gateway

__all__ = ["AllowlistGateway", "ExternalGateway", "Gateway"]
