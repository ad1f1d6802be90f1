"""Lookup roots: the directories prompt and skill discovery searches, with an optional boundary.

A root is expanded but its symbolic links are left alone here: the lookup that reads
through it resolves them and checks the result against ``boundary``, so a link
planted inside a prompt directory cannot lead a lookup outside the trusted tree.
"""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class Root:
    """An expanded lookup path and the containment boundary it must stay within (None: none)."""

    path: str
    boundary: str | None = None

    def __init__(self, path: str | os.PathLike[str], boundary: str | os.PathLike[str] | None = None) -> None:
        object.__setattr__(self, "path", _expanded(path, "path"))
        object.__setattr__(self, "boundary", None if boundary is None else _expanded(boundary, "boundary"))


def _expanded(value: str | os.PathLike[str], label: str) -> str:
    text = os.fspath(value)
    if not isinstance(text, str) or not text:
        raise ValueError(f"a lookup root's {label} must be a non-empty path, got {value!r}")
    return os.path.abspath(os.path.expanduser(text))
