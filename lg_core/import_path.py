"""Objects named by import path, ``module:QualName``: how settings, stored runs and the CLI name code."""

from __future__ import annotations

import importlib
from typing import Any


def import_attribute(path: str) -> Any:
    """The object at ``module:Qual.Name``.

    Raises ValueError when ``path`` lacks its module or its attribute part, and
    ImportError or AttributeError as importing and looking it up raise them;
    callers turn those into their own error with advice for their setting.
    """
    module_name, _, qualname = path.partition(":")
    if not module_name or not qualname:
        raise ValueError(f"{path!r} is not an import path; write it as 'module:Name'")
    target: Any = importlib.import_module(module_name)
    for part in qualname.split("."):
        target = getattr(target, part)
    return target


def import_callable(path: str, setting: str) -> Any:
    """The callable named ``module:function`` by ``setting`` (how YAML, environment and
    connection settings name code); ValueError with a message naming the setting otherwise."""
    if ":" not in path:
        raise ValueError(f"{setting} {path!r} is not an import path; write it as 'module:function'")
    try:
        target = import_attribute(path)
    except (ValueError, ImportError, AttributeError) as exc:
        raise ValueError(f"{setting} {path!r} cannot be imported: {exc}") from None
    if not callable(target):
        raise ValueError(f"{setting} {path!r} is not a function: it names {type(target).__name__}, not a callable")
    return target


__all__ = ["import_attribute", "import_callable"]
