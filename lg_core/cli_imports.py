"""Application modules and agent classes an ``lg`` command names: imported, failures as one-line UsageErrors."""

from __future__ import annotations

import importlib
import os
import sys
import traceback
from typing import Any

from lg_core.agent import Agent
from lg_core.assemblies.assembly import Assembly
from lg_core.cli_errors import UsageError
from lg_core.cli_output import preview


def project_on_path() -> None:
    """Make the working directory importable, as ``python -m`` does (a console script does not)."""
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())


def import_module(name: str) -> Any:
    """Import an application module; failures become one-line UsageErrors."""
    project_on_path()
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name and (name == exc.name or name.startswith(exc.name + ".")):
            raise UsageError(
                f"cannot import module {name!r}: no module named {exc.name!r} (check the name and PYTHONPATH)"
            ) from None
        raise UsageError(f"importing {name!r} failed: {exc}{_where(exc)}") from None
    except Exception as exc:  # noqa: BLE001 - any failure inside the module is a usage error here
        raise UsageError(f"importing {name!r} failed: {type(exc).__name__}: {exc}{_where(exc)}") from None


def _where(exc: BaseException) -> str:
    frames = traceback.extract_tb(exc.__traceback__)
    return f" (at {frames[-1].filename}:{frames[-1].lineno})" if frames else ""


def load_agent(target: str) -> type[Agent]:
    """The Agent subclass named ``module:QualName``."""
    value = _named_class(target, Agent, "agents")
    if value is Agent:
        raise UsageError(
            f"{target} is the Agent base class, which has no model or prompt of its own; name a "
            "subclass of it (for example myapp.agents:SupportAgent)"
        )
    if not (isinstance(value, type) and issubclass(value, Agent)):
        raise UsageError(f"{target} is not an Agent subclass (it is {type(value).__name__} {preview(repr(value), 60)})")
    return value


def _named_class(target: str, base: type | tuple[type, ...], listed: str) -> Any:
    """What ``module:QualName`` names; a missing name lists the module's subclasses of ``base``."""
    module_name, sep, qualname = target.partition(":")
    if not sep or not module_name or not qualname:
        raise UsageError(f"expected MODULE:CLASS (for example myapp.agents:SupportAgent), got {target!r}")
    module = import_module(module_name)
    value: Any = module
    for part in qualname.split("."):
        value = getattr(value, part, None)
        if value is None:
            found = sorted(
                n
                for n, v in vars(module).items()
                if isinstance(v, type)
                and issubclass(v, base)
                and not vars(v).get("_kind_base")
                and v not in (Agent, Assembly)
            )
            hint = f"; {listed} there: {', '.join(found)}" if found else ""
            raise UsageError(f"module {module_name!r} has no attribute {qualname!r}{hint}")
    return value


def load_entrypoint(target: str) -> type[Agent] | type[Assembly]:
    """The Agent, Workflow, Swarm or Graph subclass named ``module:QualName`` (what ``lg ask`` runs)."""
    value = _named_class(target, (Agent, Assembly), "agents and assemblies")
    runnable = isinstance(value, type) and issubclass(value, (Agent, Assembly))
    if runnable and (value is Agent or value is Assembly or vars(value).get("_kind_base")):
        raise UsageError(
            f"{target} is the {value.__name__} base class, which declares nothing to run; name a "
            "subclass of it (for example myapp.agents:SupportAgent)"
        )
    if not runnable:
        raise UsageError(
            f"{target} is not an Agent, Workflow, Swarm or Graph subclass "
            f"(it is {type(value).__name__} {preview(repr(value), 60)})"
        )
    return value  # type: ignore[no-any-return]


__all__ = ["import_module", "load_agent", "load_entrypoint", "project_on_path"]
