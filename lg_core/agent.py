"""Agent: one reusable model-driven behavior, declared as a Python class.

    class CustomerSupportAgent(Agent):
        model = "scripted:support-demo"            # or a role, or {"provider": ..., "model": ...}
        system_prompt = "Check the help center before stating company guidance."
        tools = [HelpCenterLookupTool]             # cumulative across inheritance
        limits = {"max_turns": 10}                 # merged with the parents' limits
        result_schema = {...}                      # optional: a strict schema or a Pydantic model

    run = CustomerSupportAgent.ask("Can I get a refund?")

Declarations are checked when the class is defined, so a bad schema, limit or
tool declaration fails at import. Calls are class methods: ``ask`` (a finished
Run), ``stream_ask`` (a Run you iterate for StreamEvents) and their async
forms; a standalone instance, ``CustomerSupportAgent(runtime=rt).ask(...)``, runs them
on its own runtime. Inside a run the engine builds a fresh, run-scoped instance for every
step (callbacks run on it), so keep working state in ``context.state``.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar, Concatenate, Generic, ParamSpec, TypeVar, cast

from lg_core._agent_calls import AsyncRunStream, built_off_the_loop, on_own_thread, runtime_for, until_stopped
from lg_core._agent_declarations import (
    PROMPT_FORMS,
    add_declarations,
    check_reserved_tool_names,
    check_select_model,
    check_system_prompt,
    check_unique_tool_names,
    declaring_bases,
    inline_selection,
    merge_callback_chains,
    refuse_undeclared_callbacks,
    reserved_tool_names,
    static_tool_names,
)
from lg_core.assemblies.swarm_members import SwarmHandoffTools
from lg_core.callbacks import CALLBACK_NAMES, awaited
from lg_core.code_mode.options import CodeModeOptions, code_mode_options
from lg_core.errors import ConfigurationError
from lg_core.invocation import Invocation
from lg_core.result_schema import ResultSchema, check_tools_accepted, result_strategy
from lg_core.run import Run, prepared_by
from lg_core.subagents.control_tools import SubagentControlTools
from lg_core.subagents.declarations import AssemblyToolDeclaration
from lg_core.subagents.options import SubagentOptions, subagent_options
from lg_core.subagents.steps import tool_step_body, turn_step_body
from lg_core.tool_declarations import underscored_name
from lg_core.tool_loops import ToolLoopPolicy, policy_from_declaration
from lg_core.tool_registry import ToolRegistry

DEFAULT_LIMITS: dict[str, int] = {"max_turns": 32, "max_tool_calls": 128, "max_tool_output_tokens": 16_000}
_ID = re.compile(r"^[a-z0-9][a-z0-9_\-]{0,63}$")
_RUN_OPTIONS = ("runtime", "on_event", "cancellation_token")
_P = ParamSpec("_P")
_R = TypeVar("_R")


class _entrypoint(Generic[_P, _R]):
    """A class method that, called on a standalone instance, runs on that instance's runtime.

    The spec's ``CustomerSupportAgent.new(runtime: runtime).ask(...)`` creates its Run
    on ``runtime``; a plain classmethod would silently use the current configuration's
    runtime instead. Called on the class, or with ``runtime=`` given, nothing changes.
    """

    def __init__(self, function: Callable[Concatenate[Any, _P], _R]) -> None:
        self.function = function
        # typeshed wants a callable wrapper; this one is a descriptor that binds like a classmethod.
        functools.update_wrapper(self, function)  # type: ignore[arg-type]

    def __get__(self, instance: Any, owner: type) -> Callable[_P, _R]:
        bound: Callable[_P, _R] = self.function.__get__(owner, type(owner))
        runtime = getattr(instance, "runtime", None)  # None on the class, or an __init__ that never set it
        return bound if runtime is None else functools.partial(bound, runtime=runtime)


class Agent:
    """Base class for agents."""

    model: ClassVar[Any] = None
    description: ClassVar[str] = ""
    agent_id: ClassVar[str] = "agent"
    # Agent < Assembly in the spec: its assembly_id is its agent_id (either may be declared), its kind "agent".
    assembly_id: ClassVar[str] = "agent"
    assembly_kind: ClassVar[str] = "agent"
    system_prompt: ClassVar[Any] = None
    tools: ClassVar[Sequence[Any]] = ()
    limits: ClassVar[Mapping[str, int]] = DEFAULT_LIMITS
    result_schema: ClassVar[Any] = None
    capture_diagnostics: ClassVar[bool] = True
    detect_tool_loops: ClassVar[Any] = None  # True, or {"warning_at", "terminate_at", "except"} (lg_core.tool_loops)
    code_mode: ClassVar[Any] = None  # True, or {"limits", "except", "sandbox", "engine"} (lg_core.code_mode.options)
    # Managed subagents (lg_core.subagents): subagent(...) declarations and at most one per-run resolver.
    subagents: ClassVar[Sequence[Any]] = ()
    subagent_long_poll_duration: ClassVar[float | None] = None  # seconds wait_for_subagents watches (default 30)
    subagent_limits: ClassVar[Mapping[str, Any] | None] = None  # the manager's bounds (ManagerLimits' fields)

    _tool_loop_policy: ClassVar[ToolLoopPolicy | None] = None
    _result_spec: ClassVar[ResultSchema | None] = None
    _code_mode: ClassVar[CodeModeOptions | None] = None
    _subagent_options: ClassVar[SubagentOptions | None] = None
    _callback_chains: ClassVar[dict[str, tuple[str, ...]]] = {name: () for name in CALLBACK_NAMES}
    _declared_limits: ClassVar[Mapping[str, int]] = {}  # the limits this class itself set (checked)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        own = vars(cls)
        _refuse_unsupported_declarations(cls)
        cls.agent_id = cls.assembly_id = _declared_id(cls, own)
        cls._check_model(own.get("model", cls.model))
        check_select_model(own.get("select_model"), cls.__qualname__)
        cls.tools = _merge_tools(cls)
        cls._declared_limits = _checked_limits(own.get("limits", {}), cls.__qualname__)
        cls.limits = _merge_limits(cls)
        cls._code_mode = code_mode_options(cls.code_mode, cls.__qualname__)
        if "subagent" in own:
            raise ConfigurationError(
                f"{cls.__qualname__} declares subagent; an Agent lists its subagents as "
                "subagents = [subagent(ResearchAgent, kind=...)]"
            )
        cls._subagent_options = subagent_options(
            cls, cls.subagents, cls.subagent_long_poll_duration, cls.subagent_limits
        )
        if "result_schema" in own:
            cls._result_spec = (
                None if own["result_schema"] is None else ResultSchema.build(own["result_schema"], cls.__qualname__)
            )
        check_reserved_tool_names(cls)
        if not isinstance(cls.description, str):
            raise ConfigurationError(f"{cls.__qualname__}.description must be a string")
        if "system_prompt" in own:
            check_system_prompt(own["system_prompt"], cls.__qualname__)
        cls._tool_loop_policy = policy_from_declaration(cls.detect_tool_loops, cls.__qualname__)
        cls._callback_chains = merge_callback_chains(cls)
        refuse_undeclared_callbacks(cls)

    @classmethod
    def _check_model(cls, model: Any) -> None:
        if callable(model) or isinstance(model, classmethod):
            raise ConfigurationError(
                f"{cls.__qualname__}.model is callable; to choose a model per request define "
                "`@classmethod def select_model(cls, invocation)` returning a role, target or mapping"
            )
        if model is None:
            return
        if isinstance(model, str) and model.strip() and not model.startswith(":") and not model.endswith(":"):
            return
        if isinstance(model, Mapping) and inline_selection(model.get("provider"), model.get("model")):
            return
        raise ConfigurationError(
            f"{cls.__qualname__}.model must be a role name, a 'connection:model-id' target or "
            f"{{'provider': ..., 'model': ...}}, got {model!r}"
        )

    # -- class-level queries ------------------------------------------------------------

    @classmethod
    def select_model(cls, invocation: Invocation) -> Any:
        """The model selection for ``invocation``; override to choose per request."""
        return cls.model

    @classmethod
    def model_selection(cls, invocation: Invocation) -> Any:
        """What a run resolves: the invocation's ``model_override`` (a fork's new model) if set,
        else :meth:`select_model`."""
        override = invocation.model_override
        return cls.select_model(invocation) if override is None else override

    @classmethod
    def result_spec(cls) -> ResultSchema | None:
        return cls._result_spec

    @classmethod
    def code_mode_options(cls) -> CodeModeOptions | None:
        """The checked ``code_mode`` declaration, or None when the agent does not use code mode."""
        return cls._code_mode

    @classmethod
    def callback_chains(cls) -> dict[str, tuple[str, ...]]:
        return cls._callback_chains

    @classmethod
    def logical_path(cls) -> str:
        return cls.agent_id

    # -- entrypoints ------------------------------------------------------------------------

    @_entrypoint
    def ask(cls, message: Any = None, /, **options: Any) -> Run:
        """Run ``message`` to completion and return the finished Run."""
        return cls.build_run(message, **options).call()

    @_entrypoint
    def stream_ask(cls, message: Any = None, /, **options: Any) -> Run:
        """A dormant Run: iterate it for StreamEvents; it holds the outcome afterwards."""
        return cls.build_run(message, **options)

    @_entrypoint
    async def ask_async(cls, message: Any = None, /, **options: Any) -> Run:
        """``ask`` for async code: the run is prepared and executes on worker threads.

        Preparing it can wait on I/O too (the runtime and its store on first use,
        hooks' ``prepare_run``). Cancelling the awaiting task cancels the run and
        waits for it to stop before the cancellation goes on, as leaving
        ``stream_ask_async`` does.
        """
        # _entrypoint binds the function to the class, which mypy reads as an instance.
        run = await built_off_the_loop(cast("type[Agent]", cls), message, options)
        return await until_stopped(run, on_own_thread(run.call, f"lg-ask-{run.id[:8]}"))

    @_entrypoint
    def stream_ask_async(cls, message: Any = None, /, **options: Any) -> AsyncRunStream:
        """``stream_ask`` for async code: ``async for event in stream``; ``stream.run`` afterwards."""
        return AsyncRunStream(cls.build_run(message, **options))

    @_entrypoint
    def start_execution(cls, message: Any = None, /, **options: Any) -> Any:
        """Persist the run and start it in the background; returns an Execution at once.

        With ``broker_url`` configured the run executes on Celery workers, else on a
        thread of this process. ``on_event`` (optional) receives every event.
        """
        run = cls.build_run(message, **options)
        return run.runtime.start_execution(run)

    @_entrypoint
    async def start_execution_async(cls, message: Any = None, /, **options: Any) -> Any:
        """``start_execution`` for async code: the store insert and the broker publish run on a
        worker thread, so the event loop never waits on them; returns the Execution."""
        return await asyncio.to_thread(cls.start_execution, message, **options)

    @classmethod
    def build_run(cls, message: Any = None, /, **options: Any) -> Run:
        """Validate the request and build a dormant Run (raises before a Run exists)."""
        run_options = {name: options.pop(name) for name in _RUN_OPTIONS if name in options}
        runtime = runtime_for(run_options.get("runtime"))
        # ask("text", ...) and ask(message="text", ...) (the spec's keyword form) are the same request.
        invocation = Invocation(**options) if message is None else Invocation.coerce(message, **options)
        invocation.check_storable()
        run = Run(
            cls,
            invocation,
            runtime,
            cancellation_token=run_options.get("cancellation_token"),
            on_event=run_options.get("on_event"),
        )
        run._model = runtime.resolver.resolve(cls.model_selection(invocation), invocation=invocation)
        result_strategy(cls.result_spec(), run._model)  # an unsupported strategy fails here, not in a turn
        check_tools_accepted(run._model, static_tool_names(cls), cls.__qualname__)  # and so do tools the model refuses
        return prepared_by(run, runtime.hooks)

    # -- run-scoped instance ----------------------------------------------------------------

    def __init__(
        self,
        run: Run | None = None,
        runtime: Any = None,
        model: Any = None,
        context: Any = None,
        workspace: Any = None,
        sandbox: Any = None,
    ) -> None:
        self.run = run
        self.runtime = runtime
        # The run's workspace and sandbox for this step (the workspace and sandbox settings), or None.
        self.workspace = workspace
        self.sandbox = sandbox
        # The run's resolved model on the run-scoped instance, as in the spec; the class keeps its selection.
        self.model = model  # type: ignore[misc]
        self.context = context

    @property
    def max_tool_calls(self) -> int:
        """The most tool calls one invocation of this agent may make (``limits["max_tool_calls"]``)."""
        return type(self).limits["max_tool_calls"]

    def tool_registry(self, binding: Any) -> ToolRegistry:
        """The tools available for this step, bound to ``binding``: the declared ones, and, for a Swarm
        member's run, the handoff tool of its declared routes."""
        declared = (*type(self).tools, SwarmHandoffTools)
        if type(self)._subagent_options is not None:
            declared = (*declared, SubagentControlTools)
        return ToolRegistry(declared, binding=binding, reserved=reserved_tool_names(type(self)))

    @classmethod
    def tool_step_body(cls, scope: Any) -> Any:
        """The step body of a tool call this agent executes itself (a subagent control tool), else None."""
        return tool_step_body(cls._subagent_options, scope)

    @classmethod
    def subagent_turn_body(cls, scope: Any) -> Any:
        """The step body of one turn of a subagent of this agent (a ``subagent_turn`` step)."""
        options = cls._subagent_options
        if options is None:
            raise ConfigurationError(f"{cls.__qualname__} declares no subagents, but a subagent turn of it is stored")
        return turn_step_body(options, scope)

    def render_system_prompt(self) -> str | None:
        """The system prompt for this step: the declared string, or what the method returns.

        A method may be ``async def``, a staticmethod or a classmethod, and may return None
        for no system prompt (the spec's ``String, Proc, nil``); anything else it returns is
        a ConfigurationError, not its ``str`` (``'None'``, ``'42'``) sent to the model.
        """
        cls = type(self)
        declared = inspect.getattr_static(cls, "system_prompt")
        if declared is None or isinstance(declared, str):
            return declared
        if isinstance(declared, (staticmethod, classmethod)):
            prompt = cls.system_prompt()
        elif callable(declared):
            prompt = declared(self)
        else:
            raise ConfigurationError(f"{cls.__qualname__}.system_prompt must be {PROMPT_FORMS}")
        prompt = awaited(prompt, f"{cls.__qualname__}.system_prompt")
        if prompt is None or isinstance(prompt, str):
            return prompt
        raise ConfigurationError(
            f"{cls.__qualname__}.system_prompt returned {type(prompt).__name__}; "
            "it must return a string, or None for no system prompt"
        )


def default_agent_id(class_name: str) -> str:
    """``CustomerSupportAgent`` -> ``customer_support``; ``_PrivateAgent`` -> ``private``;
    ``RéservationAgent`` -> ``reservation``.

    Leading underscores (a private class) are dropped: an agent_id starts with a letter or digit.
    """
    return underscored_name(class_name.lstrip("_"), "agent")


def _declared_id(cls: type, own: Mapping[str, Any]) -> str:
    """The class's agent_id (the spec's Assembly.assembly_id too): declared as either, else derived from its name."""
    if "agent_id" in own and "assembly_id" in own and own["agent_id"] != own["assembly_id"]:
        raise ConfigurationError(
            f"{cls.__qualname__}: assembly_id and agent_id name the same identifier; declare one of them"
        )
    declared = own.get("agent_id", own.get("assembly_id"))
    if declared is None and "agent_id" not in own and "assembly_id" not in own:
        return _derived_id(cls)
    if not isinstance(declared, str) or not _ID.fullmatch(declared):
        raise ConfigurationError(f"{cls.__qualname__}.agent_id must be 1-64 lowercase letters, digits, '_' or '-'")
    return declared


def _derived_id(cls: type) -> str:
    """The default agent_id of ``cls``, held to the rule a declared one meets; else refused, asking for one."""
    derived = default_agent_id(cls.__name__)
    if not _ID.fullmatch(derived):
        raise ConfigurationError(
            f"{cls.__qualname__}: the agent_id derived from the class name, {derived!r}, is not valid "
            "(1-64 lowercase letters, digits, '_' or '-', starting with a letter or digit); "
            "set agent_id = '...' on the class"
        )
    return derived


def _merge_tools(cls: type[Agent]) -> tuple[Any, ...]:
    merged: list[Any] = []
    for base in declaring_bases(cls):
        if "tools" not in vars(base):
            continue
        if issubclass(base, Agent):
            merged.extend(t for t in base.tools if t not in merged)  # already checked and merged
        else:
            add_declarations(merged, _as_tool_classes(base, vars(base)["tools"]), base.__qualname__)
    add_declarations(merged, _as_tool_classes(cls, vars(cls).get("tools", ())), cls.__qualname__)
    check_unique_tool_names(merged, cls.__qualname__)
    return tuple(merged)


def _as_tool_classes(owner: type, declared: Any) -> Any:
    """``declared`` with each ``agent_as_tool``/``assembly_as_tool`` declaration as the Tool class it offers."""
    if isinstance(declared, (str, bytes)) or not hasattr(declared, "__iter__"):
        return declared
    return [item.tool_class(owner) if isinstance(item, AssemblyToolDeclaration) else item for item in declared]


def _merge_limits(cls: type[Agent]) -> dict[str, int]:
    """The defaults, overlaid with the limits each class in the MRO set itself (mixins too), base first.

    Each key then resolves like a class attribute: the class earliest in the MRO
    that set it wins. Overlaying the parents' merged ``limits`` instead would let a
    second parent's copy of a default overwrite a limit the first parent set.
    """
    merged = dict(DEFAULT_LIMITS)
    for base in [*declaring_bases(cls), cls]:
        if issubclass(base, Agent):
            merged.update(vars(base).get("_declared_limits", {}))
        elif "limits" in vars(base):
            merged.update(_checked_limits(vars(base)["limits"], base.__qualname__))
    return merged


def _checked_limits(own: Any, owner: str) -> dict[str, int]:
    """A class's own ``limits`` declaration, checked when the class is defined."""
    if not isinstance(own, Mapping):
        raise ConfigurationError(f"{owner}.limits must be a dict like {{'max_turns': 10}}")
    for name, value in own.items():
        if name not in DEFAULT_LIMITS:
            raise ConfigurationError(
                f"{owner}.limits has unknown limit {name!r}; known limits: {sorted(DEFAULT_LIMITS)}"
            )
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigurationError(f"{owner}.limits[{name!r}] must be a positive integer, got {value!r}")
    return dict(own)


# The spec's Agent declarations that this project does not build yet, with what each names. As plain
# class attributes they would be accepted and silently ignored (an agent declaring a sandbox would run
# its tools without one), so declaring one fails at class definition instead.
_NOT_SUPPORTED_YET = {
    "skills": "skills",
    "manage_context": "context management",
    "system_template": "prompt templates",
    "prompt_local": "prompt templates",
}


# Declarations that the spec writes as class-level calls and that belong in ``tools`` here: as plain class
# attributes nothing would read them.
_TOOL_DECLARATIONS = ("agent_as_tool", "agents_as_tools", "assembly_as_tool", "assemblies_as_tools")


# The run-scoped objects an Agent instance holds (the spec's Agent#workspace and Agent#sandbox). They come
# from the workspace and sandbox settings; a class attribute of that name would be hidden by the instance's.
_RUN_SCOPED = ("sandbox", "workspace")


def _refuse_unsupported_declarations(cls: type[Agent]) -> None:
    """ConfigurationError for a declaration in :data:`_NOT_SUPPORTED_YET`, :data:`_TOOL_DECLARATIONS` or
    :data:`_RUN_SCOPED`, made by ``cls`` or a plain mixin it inherits from (an Agent base was checked when
    it was defined)."""
    for base in [cls, *(base for base in declaring_bases(cls) if not issubclass(base, Agent))]:
        scoped = sorted(set(vars(base)) & set(_RUN_SCOPED))
        if scoped:
            name = scoped[0]
            raise ConfigurationError(
                f"{cls.__qualname__} declares {name} (in {base.__qualname__}), but an agent's {name} is its run's, "
                f"built from the {name} setting (configure({name}=...) or lg.yaml) for every step; nothing would "
                "act on a class attribute. Remove it and set the setting"
            )
        misplaced = sorted(set(vars(base)) & set(_TOOL_DECLARATIONS))
        if misplaced:
            name = misplaced[0]
            raise ConfigurationError(
                f"{cls.__qualname__} declares {name} (in {base.__qualname__}) as a class attribute, which nothing "
                f"reads; list it among the tools instead: tools = [{name}(SomeAgent, name=...)]"
            )
        declared = sorted(set(vars(base)) & set(_NOT_SUPPORTED_YET))
        if declared:
            name = declared[0]
            raise ConfigurationError(
                f"{cls.__qualname__} declares {name} (in {base.__qualname__}), but {_NOT_SUPPORTED_YET[name]} "
                f"are not supported yet, so nothing would act on it; remove the declaration"
            )


__all__ = ["Agent", "AsyncRunStream", "DEFAULT_LIMITS", "default_agent_id"]
