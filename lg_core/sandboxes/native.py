"""Native: the operating system's own isolating backend, failing closed where there is none.

On Linux this is Bubblewrap. Seatbelt (macOS) is not implemented here, so macOS and
every other platform raise UnsupportedPlatformError: selecting ``native`` never
falls back to unrestricted host execution.
"""

from __future__ import annotations

import sys
from typing import Any

from lg_core.errors import UnsupportedPlatformError
from lg_core.sandbox.probe_report import ProbeReport
from lg_core.sandbox.sandbox import Sandbox
from lg_core.sandboxes.bubblewrap import Bubblewrap
from lg_core.workspace import Workspace


def native_backend(platform: str = sys.platform) -> type[Sandbox]:
    """The isolating backend class for ``platform``; UnsupportedPlatformError when there is none."""
    if platform.startswith("linux"):
        return Bubblewrap
    if platform == "darwin":
        raise UnsupportedPlatformError("the native sandbox on macOS is Seatbelt, which this build does not provide")
    raise UnsupportedPlatformError(f"no native sandbox backend for platform {platform!r}")


class Native:
    """Builds the native backend for this platform; ``Native(workspace=...)`` is a Bubblewrap on Linux."""

    name = "native"

    def __new__(cls, workspace: Workspace, platform: str = sys.platform, **options: Any) -> Sandbox:  # type: ignore[misc]
        return native_backend(platform)(workspace=workspace, **options)

    @classmethod
    def probe(cls, **options: Any) -> ProbeReport:
        """Whether the native backend for ``platform`` is available, with its capabilities."""
        platform = str(options.get("platform", sys.platform))
        try:
            backend = native_backend(platform)
        except UnsupportedPlatformError as error:
            return ProbeReport(cls.name, False, str(error))
        report = backend.probe(**options)
        return ProbeReport(cls.name, report.available, report.reason, report.capabilities, report.details)
