"""AssemblyBuilder: the mutable, runtime form of an assembly declaration.

Use a builder when runtime configuration decides the participants or routes; classes are
the usual, easier-to-find form. A builder takes the same declarations as its class, each
checked as it is made; :meth:`definition` copies the current ones into a fixed, validated
AssemblyDefinition, so each run gets its own snapshot and later edits affect later runs
only. Callbacks stay live application code: a definition refers to them, it does not copy
what they captured.

A builder is called as its class is (``ask``, ``stream_ask``, ``start_execution``): each call
runs a new snapshot, which the run stores with its frame by import references
(``_definition_codec``), so workers and a resumed run execute the definition the run started
with. A callback no other process could import (a lambda) is refused when the run is built,
before it exists.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from lg_core.assemblies.assembly import Assembly, checked_id
from lg_core.assemblies.definition import AssemblyDefinition, Spec
from lg_core.errors import ConfigurationError

if TYPE_CHECKING:
    from lg_core.run import Run


class AssemblyBuilder:
    """Shared identity, description and snapshotting of the Workflow, Swarm and Graph builders."""

    kind = "assembly"
    default_base: type[Assembly] = Assembly

    def __init__(
        self, id: str | None = None, description: str | None = None, runtime: Any = None, base: Any = None
    ) -> None:
        if base is not None and not (isinstance(base, type) and issubclass(base, self.default_base)):
            raise ConfigurationError(f"{type(self).__name__}: base must be a {self.kind} class, got {base!r}")
        self._base: type[Assembly] = base or self.default_base
        self._id = None if id is None else checked_id(id, f"{type(self).__name__} id")
        if description is not None and not isinstance(description, str):
            raise ConfigurationError(f"{type(self).__name__}: description must be a string, got {description!r}")
        self._description = description
        self.runtime = runtime
        seed = self._base.declared_definition()
        if seed is not None:
            self._seed(seed)

    def assembly_kind(self) -> str:
        return self.kind

    def assembly_id(self, value: str | None = None) -> str | None:
        """Read or assign the stable identifier (default: the base class's)."""
        if value is not None:
            self._id = checked_id(value, f"{type(self).__name__} id")
        if self._id is not None:
            return self._id
        return None if self._base is self.default_base else self._base.assembly_id

    def description(self, value: str | None = None) -> str:
        """Read or assign the human-readable description (default: the base class's)."""
        if value is not None:
            if not isinstance(value, str):
                raise ConfigurationError(f"{type(self).__name__}: description must be a string, got {value!r}")
            self._description = value
        return self._base.description if self._description is None else self._description

    def definition(self) -> AssemblyDefinition:
        """A fixed, validated copy of the current declarations; ConfigurationError naming what is wrong."""
        assembly_id = self.assembly_id()
        owner = f"{type(self).__name__}({assembly_id!r})"
        if assembly_id is None:
            raise ConfigurationError(f"{type(self).__name__} has no id; pass id='...' or call assembly_id('...')")
        return AssemblyDefinition(self.kind, assembly_id, self.description(), self._base, self._spec(owner))

    # -- calls (the class's calling style, each on a fresh snapshot) -------------------------

    def build_run(self, message: Any = None, /, **options: Any) -> Run:
        """A dormant Run of the current declarations (a fixed copy of them, stored with the run)."""
        if self.runtime is not None:
            options.setdefault("runtime", self.runtime)
        return self.definition().build_run(message, **options)

    def ask(self, message: Any = None, /, **options: Any) -> Run:
        """Run the current declarations to completion and return the finished Run."""
        return self.build_run(message, **options).call()

    def stream_ask(self, message: Any = None, /, **options: Any) -> Run:
        """A dormant Run of the current declarations: iterate it for StreamEvents."""
        return self.build_run(message, **options)

    def start_execution(self, message: Any = None, /, **options: Any) -> Any:
        """Persist a run of the current declarations and start it in the background; returns an Execution.

        With a broker the workers execute the definition stored with the run, never this builder:
        edits made after the start change later runs only."""
        run = self.build_run(message, **options)
        return run.runtime.start_execution(run)

    async def start_execution_async(self, message: Any = None, /, **options: Any) -> Any:
        """``start_execution`` for async code: the store insert and the broker publish run on a worker thread."""
        return await asyncio.to_thread(self.start_execution, message, **options)

    def validate(self) -> AssemblyBuilder:
        """This builder when its current declarations are complete and valid; else ConfigurationError."""
        self.definition()
        return self

    def _seed(self, definition: AssemblyDefinition) -> None:
        """Start from a base class's declarations (a kind implements it)."""

    def _spec(self, owner: str) -> Spec:
        raise NotImplementedError


__all__ = ["AssemblyBuilder"]
