"""The architecture's rules hold: the import-linter contracts in pyproject.toml (package
direction, a broker-free lg_core, lg_core's layers, private modules), and no import cycle
among the packages' modules, counting imports placed inside functions.

Both checks read the source with grimp, which sees every import statement wherever it
stands (inside a function too), unlike a look at ``sys.modules`` after importing."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Iterable, Mapping
from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("lg_core", "lg_workers", "lg_scheduler")


def strongly_connected(edges: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """The import cycles of a graph: its strongly connected components of two or more modules
    (Tarjan's algorithm, iterative so a deep graph cannot exhaust the stack)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges.get(root, ()))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, successors = work[-1]
            for successor in successors:
                if successor not in index:
                    index[successor] = low[successor] = len(index)
                    stack.append(successor)
                    on_stack.add(successor)
                    work.append((successor, iter(sorted(edges.get(successor, ())))))
                    break
                if successor in on_stack:
                    low[node] = min(low[node], index[successor])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        cycles.append(sorted(component))
    return cycles


def import_edges(graph: grimp.ImportGraph) -> dict[str, set[str]]:
    return {module: graph.find_modules_directly_imported_by(module) for module in graph.modules}


def test_the_import_contracts_are_kept():
    result = subprocess.run(
        [str(Path(sys.executable).with_name("lint-imports")), "--no-cache"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]


def test_no_module_of_the_packages_is_in_an_import_cycle():
    graph = grimp.build_graph(*PACKAGES, exclude_type_checking_imports=True, cache_dir=None)
    assert strongly_connected(import_edges(graph)) == []


def test_the_cycle_check_counts_an_import_inside_a_function(tmp_path, monkeypatch):
    package = tmp_path / "looped"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "first.py").write_text("from looped import second\n")
    (package / "second.py").write_text(
        textwrap.dedent("""
        def late():
            from looped import first
            return first
    """)
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    graph = grimp.build_graph("looped", cache_dir=None)
    assert strongly_connected(import_edges(graph)) == [["looped.first", "looped.second"]]


@pytest.mark.parametrize(
    ("edges", "cycles"),
    [
        ({"a": {"b"}, "b": {"c"}, "c": set()}, []),
        ({"a": {"b"}, "b": {"a"}, "c": {"a"}}, [["a", "b"]]),
        ({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"e"}, "e": {"d"}}, [["a", "b", "c"], ["d", "e"]]),
    ],
)
def test_strongly_connected_finds_every_cycle_and_nothing_else(edges, cycles):
    assert sorted(strongly_connected(edges)) == cycles
