"""Objects named by import path, ``module:QualName``: how settings, stored runs and the CLI name code."""

from __future__ import annotations

import pkgutil
import traceback
from typing import Any


def import_attribute(path: str) -> Any:
    """The object at ``module:Qual.Name``.

    Raises ValueError when ``path`` lacks its module or its attribute part or
    either is not a dotted Python name, and ImportError or AttributeError as
    importing and looking it up raise them;
    callers turn those into their own error with advice for their setting.
    Whatever else the module's own code raises while it is imported (RuntimeError,
    SyntaxError ...) propagates too: describe it with :func:`import_failure`.
    """
    module_name, _, qualname = path.partition(":")
    if not module_name or not qualname:
        raise ValueError(f"{path!r} is not an import path; write it as 'module:Name'")
    return pkgutil.resolve_name(path)


def import_callable(path: str, setting: str) -> Any:
    """The callable named ``module:function`` by ``setting`` (how YAML, environment and
    connection settings name code); ValueError with a message naming the setting otherwise."""
    if ":" not in path:
        raise ValueError(f"{setting} {path!r} is not an import path; write it as 'module:function'")
    try:
        target = import_attribute(path)
    except (ValueError, ImportError, AttributeError) as exc:
        raise ValueError(f"{setting} {path!r} cannot be imported: {exc}") from None
    except Exception as exc:  # noqa: BLE001 - the module's own code failed: a bad setting, not a crash
        raise ValueError(import_failure(path, exc, setting)) from exc
    if not callable(target):
        raise ValueError(f"{setting} {path!r} is not a function: it names {type(target).__name__}, not a callable")
    return target


def import_failure(path: str, exc: BaseException, setting: str = "") -> str:
    """``importing session_actor 'mod:f' failed: RuntimeError: boom (at /app/mod.py:3)``, for a
    module whose own code raised while ``path`` (named by ``setting``, if given) was imported.

    Worded as the CLI reports a failing ``LG_IMPORTS`` module, so that a setting naming
    broken code is one line the user can act on (which file and line to fix) rather than
    a traceback through importlib; callers chain ``exc`` for a debugger.
    """
    if isinstance(exc, SyntaxError):  # its traceback ends in importlib; the file and line are on it
        where = f" (at {exc.filename}:{exc.lineno})" if exc.filename else ""
        reason = exc.msg
    else:
        frames = traceback.extract_tb(exc.__traceback__)
        where = f" (at {frames[-1].filename}:{frames[-1].lineno})" if frames else ""
        reason = str(exc)
    named = f"{setting} {path!r}" if setting else repr(path)
    return f"importing {named} failed: {type(exc).__name__}: {reason}{where}"


__all__ = ["import_attribute", "import_callable", "import_failure"]
