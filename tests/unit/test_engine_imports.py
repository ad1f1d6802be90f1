"""The engine does not import the public-API modules built on it (lg_core.run, services,
execution, agent), not even for type checking: they import the engine, and an import back
would tie them into one cycle. The engine names what it needs of a Run and a Runtime as
protocols (lg_core/engine/_run_protocol.py) instead."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ENGINE = Path(__file__).resolve().parents[2] / "lg_core" / "engine"
PUBLIC_API = ("lg_core.run", "lg_core.runtime", "lg_core.execution", "lg_core.agent")


def imported_modules(path: Path) -> set[str]:
    """Every module ``path`` imports, anywhere in it (inside functions and TYPE_CHECKING blocks too)."""
    modules = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            modules |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            modules.add(node.module)
    return modules


@pytest.mark.parametrize("path", sorted(ENGINE.glob("*.py")), ids=lambda path: path.name)
def test_an_engine_module_imports_no_public_api_module(path):
    imported = {
        module
        for module in imported_modules(path)
        if module in PUBLIC_API or module.startswith(tuple(f"{api}." for api in PUBLIC_API))
    }
    assert not imported, f"lg_core/engine/{path.name} imports {sorted(imported)}"


def test_the_engine_package_init_imports_nothing():
    """Importing one engine module must not import the others through the package."""
    assert imported_modules(ENGINE / "__init__.py") == set()
