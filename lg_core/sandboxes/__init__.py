"""The built-in sandbox backends: Bubblewrap (Linux namespaces), Native (this platform's
isolating backend, failing closed) and Unrestricted (host execution, explicit opt-in).

Each is also reachable by name through ``Sandbox.resolve_provider``.

    bubblewrap.py    Bubblewrap: namespaces, mounts, rlimits, the allowlist gateway's wiring
    unrestricted.py  Unrestricted: host execution with bounded output and process-group cleanup
    native.py        Native: Bubblewrap on Linux, UnsupportedPlatformError elsewhere
"""

from lg_core.sandboxes.bubblewrap import Bubblewrap
from lg_core.sandboxes.native import Native, native_backend
from lg_core.sandboxes.unrestricted import Unrestricted

__all__ = ["Bubblewrap", "Native", "Unrestricted", "native_backend"]
