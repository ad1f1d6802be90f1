"""lg_core is the broker-free core: no module of it imports Celery, kombu or the worker and
scheduler packages, not even inside a function, where an import-time check of ``sys.modules``
cannot see it. Redis is imported by ``lg_core.broker`` alone (the broker reachability check)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

CORE = Path(__file__).resolve().parents[2] / "lg_core"
FORBIDDEN = ("celery", "kombu", "lg_workers", "lg_scheduler")
REDIS_ALLOWED_IN = {"broker.py"}


def imported_roots(path: Path) -> set[str]:
    """The top-level package of every absolute import in ``path``, wherever it stands."""
    roots = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            roots |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            roots.add(node.module.split(".")[0])
    return roots


CORE_MODULES = sorted(path for path in CORE.rglob("*.py") if "migrations" not in path.parts)


@pytest.mark.parametrize("path", CORE_MODULES, ids=lambda path: str(path.relative_to(CORE)))
def test_a_core_module_imports_no_worker_package_or_broker_client(path):
    roots = imported_roots(path)
    assert not roots & set(FORBIDDEN), f"{path.relative_to(CORE)} imports {sorted(roots & set(FORBIDDEN))}"
    if path.relative_to(CORE).as_posix() not in REDIS_ALLOWED_IN:
        assert "redis" not in roots, f"{path.relative_to(CORE)} imports redis"


def test_the_check_sees_an_import_inside_a_function(tmp_path):
    module = tmp_path / "late.py"
    module.write_text("def connect():\n    from celery import Celery\n    return Celery\n")
    assert "celery" in imported_roots(module)
