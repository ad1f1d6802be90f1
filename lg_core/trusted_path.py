"""TrustedPath: a prompt directory the application vouches for as its own code.

Prompt templates run as code in this process, so only a directory the application
configured may be marked trusted, never one a request or a model chose. Construction
resolves symbolic links at once, so the trust applies to the directory as it is now
and a later change of a link does not move it elsewhere; it checks existence and
type, not who may edit the directory.
"""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class TrustedPath:
    """A resolved, existing directory asserted as trusted by the caller."""

    path: str

    def __init__(self, path: str | os.PathLike[str]) -> None:
        text = os.fspath(path)
        if not isinstance(text, str) or not text:
            raise ValueError(f"a trusted path must be a non-empty path, got {path!r}")
        try:
            resolved = os.path.realpath(os.path.expanduser(text), strict=True)
        except OSError:
            raise ValueError(f"trusted path {text!r} does not exist") from None
        if not os.path.isdir(resolved):
            raise ValueError(f"trusted path {text!r} is not a directory")
        object.__setattr__(self, "path", resolved)

    def __fspath__(self) -> str:
        return self.path
