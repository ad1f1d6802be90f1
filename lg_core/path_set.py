"""PathSet: prompt or skill lookup roots in a fixed search order.

Immutable on purpose: a configuration holding a PathSet keeps the roots it was built
with, and ``paths + other`` builds a new set, so extending a path set at run time
never changes what an already running configuration searches.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from typing import Union

from lg_core.lookup import Root

PathLike = Union[str, "os.PathLike[str]", Root]


class PathSet:
    """An ordered, immutable sequence of :class:`~lg_core.lookup.Root` values."""

    __slots__ = ("_paths",)
    _paths: tuple[Root, ...]

    def __init__(self, paths: PathSet | Iterable[PathLike] | PathLike = ()) -> None:
        if isinstance(paths, PathSet):
            roots: tuple[Root, ...] = paths.paths
        elif isinstance(paths, str | os.PathLike | Root):
            roots = (_root(paths),)
        else:
            roots = tuple(_root(path) for path in paths)
        object.__setattr__(self, "_paths", roots)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("a PathSet is immutable; use + to build a new one")

    @property
    def paths(self) -> tuple[Root, ...]:
        """The roots in search order."""
        return self._paths

    def __add__(self, other: PathSet | Iterable[PathLike] | PathLike) -> PathSet:
        """A new set searching this one's roots, then ``other``'s; neither is changed."""
        return PathSet((*self.paths, *PathSet(other).paths))

    def __iter__(self) -> Iterator[Root]:
        return iter(self.paths)

    def __len__(self) -> int:
        return len(self.paths)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PathSet) and self.paths == other.paths

    def __hash__(self) -> int:
        return hash(self.paths)

    def to_a(self) -> list[Root]:
        """The roots copied into a new list the caller may change."""
        return list(self.paths)

    to_list = to_a

    def __repr__(self) -> str:
        return f"PathSet({[root.path for root in self.paths]!r})"


def _root(value: PathLike) -> Root:
    if isinstance(value, Root):
        return value
    if isinstance(value, str | os.PathLike):
        return Root(value)
    raise TypeError(f"a PathSet holds paths or lookup Roots, not {type(value).__name__}")
