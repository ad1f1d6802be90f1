"""Checking, before ``lg worker`` starts, that the sandbox its queues need can run on this host.

A worker serving ``lg.sandbox`` exists to run confined programs, and one serving
``lg.tools`` opens the run's sandbox for every tool call when the ``sandbox``
setting names an enforcing backend. On a host where that backend cannot run
(no ``bwrap``, user namespaces disabled, another platform) every such step would
fail, one after another, after the worker took it; so the command refuses to
start instead, with the probe's reason. The backend is the ``sandbox`` setting's
provider; ``lg.sandbox`` without one needs the platform's isolating backend
(``native``), never unrestricted execution. A factory setting names its backend
only when called, so for ``lg.tools`` it is not probed here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from lg_core.errors import DependencyError
from lg_core.sandbox import Sandbox
from lg_workers.queues import SANDBOX, TOOLS

DEFAULT_BACKEND = "native"
UNRESTRICTED = "unrestricted"
# The Bubblewrap options that change what its probe finds, by the name the probe takes them under.
_PROBE_OPTIONS = {"bubblewrap": "executable", "host_user": "host_user", "host_group": "host_group"}


def required_backend(sandbox_setting: Any, queues: Sequence[str]) -> tuple[str, dict[str, Any]] | None:
    """The backend (and probe options) the worker's queues need, or None when none is needed."""
    named = _named_backend(sandbox_setting)
    if SANDBOX in queues:
        return named or (DEFAULT_BACKEND, {})
    if TOOLS in queues and named is not None and named[0] != UNRESTRICTED:
        return named
    return None


def check_sandbox(sandbox_setting: Any, queues: Sequence[str]) -> None:
    """DependencyError naming the queue and the probe's reason when the needed backend cannot run here."""
    required = required_backend(sandbox_setting, queues)
    if required is None:
        return
    name, options = required
    try:
        Sandbox.require(name, **options)
    except DependencyError as error:
        served = SANDBOX if SANDBOX in queues else TOOLS
        raise DependencyError(
            f"lg worker serves {served}, whose steps run in the {name} sandbox, but {error}; install or enable it "
            f"on this host, or serve {served} from a worker on a host that has it"
        ) from None


def _named_backend(setting: Any) -> tuple[str, dict[str, Any]] | None:
    if not isinstance(setting, Mapping):
        return None
    options = {probe: setting[key] for key, probe in _PROBE_OPTIONS.items() if key in setting}
    return str(setting.get("provider", DEFAULT_BACKEND)), options


__all__ = ["check_sandbox", "required_backend"]
