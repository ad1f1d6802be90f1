"""Assembly: the base of Workflow, Swarm and Graph, the classes that coordinate several participants.

A subclass's declarations are read and checked when the class is defined, as an Agent's
are: a complete declaration (a Graph with nodes, a Swarm with members, a Workflow with a
``perform``) is validated then and fixed as its :meth:`definition`, so a bad topology fails
at import, naming the node, edge or member at fault. A class declaring none of them is an
abstract base for others; its :meth:`validate` says what it lacks.

An assembly is called as an Agent is (``ask``, ``stream_ask``, ``start_execution`` and
their async forms), on the same Run and durable engine. A Graph runs (its frame and
node steps: ``_graph_frame``, ``_graph_node``), a Swarm (``_swarm_frame``, ``_swarm_member``)
and a Workflow (its perform step replayed against its recorded calls: ``_workflow_step``,
``_workflow_calls``).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar, cast

from lg_core._agent_calls import AsyncRunStream, built_off_the_loop, on_own_thread, until_stopped
from lg_core.assemblies._assembly_runs import build_assembly_run
from lg_core.assemblies.definition import AssemblyDefinition
from lg_core.assemblies.trajectory import Attempt, Step, Trajectory
from lg_core.errors import ConfigurationError
from lg_core.tool_declarations import underscored_name

if TYPE_CHECKING:
    from lg_core.run import Run

ID_PATTERN = re.compile(r"^[a-z0-9][a-z0-9_\-]{0,63}$")
AGENT_DECLARATIONS = (
    "agent_id",
    "capture_diagnostics",
    "detect_tool_loops",
    "limits",
    "model",
    "result_schema",
    "select_model",
    "system_prompt",
    "tools",
)
GRAPH_DECLARATIONS = ("nodes", "edges", "finish", "max_concurrency")
SWARM_DECLARATIONS = ("members", "handoffs", "max_handoff_repeats")


class Assembly:
    """Gives one coordinated group of participants the calling style of one Agent."""

    assembly_kind: ClassVar[str] = "assembly"
    assembly_id: ClassVar[str] = "assembly"
    description: ClassVar[str] = ""

    Step = Step
    Attempt = Attempt
    Trajectory = Trajectory

    # Class attributes this kind does not read, with what to do instead: as plain attributes they would be
    # accepted and silently ignored (a Graph declaring `model`, a Swarm spelling `handoff` for `handoffs`).
    _REFUSED: ClassVar[Mapping[str, str]] = dict.fromkeys(
        AGENT_DECLARATIONS,
        "that is an Agent declaration, and an assembly has no model loop of its own; declare it on its Agents",
    )
    _definition: ClassVar[AssemblyDefinition | None] = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        own = vars(cls)
        for name in sorted(set(own) & set(cls._REFUSED)):
            raise ConfigurationError(
                f"{cls.__qualname__} declares `{name}`, which a {cls.assembly_kind} does not read: {cls._REFUSED[name]}"
            )
        cls.assembly_id = assembly_id_of(cls, own)
        if not isinstance(cls.description, str):
            raise ConfigurationError(f"{cls.__qualname__}.description must be a string")
        # A kind's own base class (Workflow, Swarm, Graph) declares nothing to read.
        cls._definition = None if vars(cls).get("_kind_base") else cls._read_definition()

    @classmethod
    def _read_definition(cls) -> AssemblyDefinition | None:
        """The class's checked definition, or None for an abstract base (a kind implements it)."""
        return None

    @classmethod
    def _incomplete(cls) -> str:
        """Why this class has no definition: what a concrete one must declare."""
        return f"{cls.__qualname__} is the {cls.assembly_kind} base class; subclass it"

    @classmethod
    def declared_definition(cls) -> AssemblyDefinition | None:
        """The definition fixed when the class was defined; None for an abstract base."""
        return cls._definition

    @classmethod
    def definition(cls) -> AssemblyDefinition:
        """The immutable definition of this class; ConfigurationError saying what an abstract base lacks."""
        if cls._definition is None:
            raise ConfigurationError(cls._incomplete())
        return cls._definition

    @classmethod
    def validate(cls) -> type[Assembly]:
        """This class when its declaration is complete and valid (checked when defined); else ConfigurationError."""
        cls.definition()
        return cls

    # -- calls (the Agent's calling style) -------------------------------------------------

    @classmethod
    def build_run(cls, message: Any = None, /, **options: Any) -> Run:
        """Validate the request and build a dormant Run (raises before a Run exists)."""
        return build_assembly_run(cls, message, options)

    @classmethod
    def ask(cls, message: Any = None, /, **options: Any) -> Run:
        """Run ``message`` to completion and return the finished Run."""
        return cls.build_run(message, **options).call()

    @classmethod
    def stream_ask(cls, message: Any = None, /, **options: Any) -> Run:
        """A dormant Run: iterate it for StreamEvents; it holds the outcome afterwards."""
        return cls.build_run(message, **options)

    @classmethod
    async def ask_async(cls, message: Any = None, /, **options: Any) -> Run:
        """``ask`` for async code, on a thread of its own; cancelling the awaiting task cancels the run."""
        run = await built_off_the_loop(cast(Any, cls), message, options)
        return await until_stopped(run, on_own_thread(run.call, f"lg-ask-{run.id[:8]}"))

    @classmethod
    def stream_ask_async(cls, message: Any = None, /, **options: Any) -> AsyncRunStream:
        """``stream_ask`` for async code: ``async for event in stream``; ``stream.run`` afterwards."""
        return AsyncRunStream(cls.build_run(message, **options))

    @classmethod
    def start_execution(cls, message: Any = None, /, **options: Any) -> Any:
        """Persist the run and start it in the background (Celery workers with a broker); returns an Execution."""
        run = cls.build_run(message, **options)
        return run.runtime.start_execution(run)

    @classmethod
    async def start_execution_async(cls, message: Any = None, /, **options: Any) -> Any:
        """``start_execution`` for async code: the store insert and the broker publish run on a worker thread."""
        return await asyncio.to_thread(cls.start_execution, message, **options)

    @classmethod
    def started_definition(cls, run: Any) -> tuple[AssemblyDefinition, Any]:
        """The definition a new run of this class executes, and the form stored with the run.

        A builder's run carries its own snapshot (``run.assembly_definition``), always storable (its
        run is refused before it exists otherwise: ``build_assembly_run``); a class's own run executes
        the class's definition, stored as None when it names a lambda the class declares, which the
        class itself then stands for.
        """
        given = getattr(run, "assembly_definition", None)
        definition: AssemblyDefinition = cls.definition() if given is None else given
        try:
            return definition, definition.to_dict()
        except ConfigurationError:
            if given is not None:
                raise
            return definition, None

    @classmethod
    def _new_definition(cls, spec: Any) -> AssemblyDefinition:
        return AssemblyDefinition(cls.assembly_kind, cls.assembly_id, cls.description, cls, spec)


def assembly_id_of(cls: type, own: Mapping[str, Any]) -> str:
    """The declared ``assembly_id``, else the class name in snake case without its kind (``SupportFlowGraph``
    -> ``support_flow``); ConfigurationError asking for one when neither is a valid id."""
    kind = str(getattr(cls, "assembly_kind", "assembly"))
    declared = own.get("assembly_id")
    if declared is None:
        derived = underscored_name(cls.__name__.lstrip("_"), kind)
        if ID_PATTERN.fullmatch(derived):
            return derived
        raise ConfigurationError(
            f"{cls.__qualname__}: the assembly_id derived from the class name, {derived!r}, is not valid "
            "(1-64 lowercase letters, digits, '_' or '-'); set assembly_id = '...' on the class"
        )
    return checked_id(declared, f"{cls.__qualname__}.assembly_id")


def checked_id(value: Any, owner: str) -> str:
    if not isinstance(value, str) or not ID_PATTERN.fullmatch(value):
        raise ConfigurationError(f"{owner} must be 1-64 lowercase letters, digits, '_' or '-', got {value!r}")
    return value


__all__ = ["Assembly", "ID_PATTERN", "assembly_id_of", "checked_id"]
