"""Outbound connectivity for sandbox-launched processes: none, inherit or an allowlist.

The policy is a declaration; enforcement belongs to the backend (a network namespace
for ``none``) and, for ``allowlist``, to an enforcing gateway that the backend must
also make the only way out. Proxy variables alone are not an allowlist, so a backend
without such a gateway refuses the allowlist instead of running with it ignored.
The policy never applies to provider requests or tool code in the worker itself.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from lg_core.errors import PolicyError

MODES = ("none", "allowlist", "inherit")
_RANK = {mode: rank for rank, mode in enumerate(MODES)}
_HOST = re.compile(r"^(\*\.)?[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*$|^\[[0-9a-f:]+\]$")
DEFAULT_PORT = 443


@dataclass(frozen=True)
class NetworkPolicy:
    """Connectivity mode, allowlisted ``host:port`` endpoints and gateway options."""

    mode: str
    allow: tuple[str, ...] = ()
    inspection: str = "connect"
    gateway: Any = None
    authorizer: Any = None
    forward_headers: tuple[str, ...] = ()
    mutation_headers: tuple[str, ...] = ()

    def __init__(
        self,
        mode: str,
        allow: Iterable[Any] = (),
        inspection: str = "connect",
        gateway: Any = None,
        authorizer: Any = None,
        forward_headers: Iterable[str] = (),
        mutation_headers: Iterable[str] = (),
    ) -> None:
        if mode not in MODES:
            raise PolicyError(f"network mode must be one of {', '.join(MODES)}, got {mode!r}")
        endpoints = tuple(sorted({normalized_endpoint(entry) for entry in allow}))
        if mode == "allowlist" and not endpoints:
            raise PolicyError("an allowlist network policy needs at least one allowed endpoint")
        if mode != "allowlist" and endpoints:
            raise PolicyError(f"network mode {mode!r} takes no allowed endpoints; use mode 'allowlist'")
        if inspection not in ("connect", "http"):
            raise PolicyError(f"network inspection must be 'connect' or 'http', got {inspection!r}")
        object.__setattr__(self, "mode", mode)
        object.__setattr__(self, "allow", endpoints)
        object.__setattr__(self, "inspection", inspection)
        object.__setattr__(self, "gateway", gateway)
        object.__setattr__(self, "authorizer", authorizer)
        object.__setattr__(self, "forward_headers", tuple(sorted(h.lower() for h in forward_headers)))
        object.__setattr__(self, "mutation_headers", tuple(sorted(h.lower() for h in mutation_headers)))

    @classmethod
    def coerce(cls, value: NetworkPolicy | str | bool | Mapping[str, Any] | None) -> NetworkPolicy | None:
        """``value`` unchanged, or a policy from a mode name, False (none) or a mapping."""
        if value is None or isinstance(value, NetworkPolicy):
            return value
        if value is False:
            return cls("none")
        if value is True:
            raise PolicyError("network=True is ambiguous; say 'inherit' or give an allowlist")
        if isinstance(value, str):
            return cls(value)
        if isinstance(value, Mapping):
            options = dict(value)
            mode = options.pop("mode", "allowlist" if options.get("allow") else None)
            if mode is None:
                raise PolicyError("a network policy mapping needs a 'mode' (none, inherit or allowlist)")
            try:
                return cls(mode, **options)
            except TypeError as error:
                raise PolicyError(f"invalid network policy options: {error}") from None
        raise PolicyError(f"a network policy must be a mode name or a mapping, got {type(value).__name__}")

    @property
    def none(self) -> bool:
        """Whether outbound connectivity must be disabled."""
        return self.mode == "none"

    @property
    def inherit(self) -> bool:
        """Whether the backend's ordinary connectivity is allowed."""
        return self.mode == "inherit"

    @property
    def allowlist(self) -> bool:
        """Whether outbound traffic must pass an enforcing allowlist gateway."""
        return self.mode == "allowlist"

    def narrows(self, parent: NetworkPolicy) -> bool:
        """Whether this policy grants nothing ``parent`` does not."""
        if _RANK[self.mode] < _RANK[parent.mode]:
            return self.mode != "allowlist" or parent.mode == "inherit" or set(self.allow) <= set(parent.allow)
        if self.mode != parent.mode:
            return False
        return self.mode != "allowlist" or set(self.allow) <= set(parent.allow)


def normalized_endpoint(entry: Any) -> str:
    """``host:port`` in lower case from ``"host"``, ``"host:port"`` or ``{"host": ..., "port": ...}``."""
    if isinstance(entry, Mapping):
        host, port = entry.get("host"), entry.get("port", DEFAULT_PORT)
    elif isinstance(entry, str):
        host, _, port_text = entry.strip().rpartition(":") if entry.count(":") == 1 else (entry, "", "")
        host = host or entry
        port = int(port_text) if port_text.isdigit() else (DEFAULT_PORT if not port_text else -1)
    else:
        raise PolicyError(f"an allowed endpoint must be 'host:port' or a mapping, got {entry!r}")
    if not isinstance(host, str) or not _HOST.match(host.lower()):
        raise PolicyError(f"allowed endpoint {entry!r} has no valid host name")
    if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
        raise PolicyError(f"allowed endpoint {entry!r} has no valid port")
    return f"{host.lower()}:{port}"
