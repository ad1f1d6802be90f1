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
import contextlib
import contextvars
import functools
import inspect
import re
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import Any, ClassVar, Concatenate, Generic, ParamSpec, TypeVar, cast

from lg_core.callbacks import CALLBACK_NAMES, awaited, collect
from lg_core.errors import CONTROL_FLOW_ERRORS, ConfigurationError
from lg_core.invocation import Invocation
from lg_core.result_schema import ResultSchema, check_tools_accepted, result_strategy
from lg_core.run import Run, prepared_by
from lg_core.tool import Tool, underscored_name
from lg_core.tool_loops import ToolLoopPolicy, policy_from_declaration
from lg_core.tool_registry import ToolRegistry, check_declaration

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


T = TypeVar("T")


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

    _tool_loop_policy: ClassVar[ToolLoopPolicy | None] = None
    _result_spec: ClassVar[ResultSchema | None] = None
    _callback_chains: ClassVar[dict[str, tuple[str, ...]]] = {name: () for name in CALLBACK_NAMES}
    _declared_limits: ClassVar[Mapping[str, int]] = {}  # the limits this class itself set (checked)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        own = vars(cls)
        _refuse_unsupported_declarations(cls)
        cls.agent_id = cls.assembly_id = _declared_id(cls, own)
        cls._check_model(own.get("model", cls.model))
        _check_select_model(own.get("select_model"), cls.__qualname__)
        cls.tools = _merge_tools(cls)
        cls._declared_limits = _checked_limits(own.get("limits", {}), cls.__qualname__)
        cls.limits = _merge_limits(cls)
        if "result_schema" in own:
            cls._result_spec = None if own["result_schema"] is None else ResultSchema.build(own["result_schema"], cls.__qualname__)
        _check_reserved_tool_names(cls)
        if not isinstance(cls.description, str):
            raise ConfigurationError(f"{cls.__qualname__}.description must be a string")
        if "system_prompt" in own:
            _check_system_prompt(own["system_prompt"], cls.__qualname__)
        cls._tool_loop_policy = policy_from_declaration(cls.detect_tool_loops, cls.__qualname__)
        cls._callback_chains = _merge_callback_chains(cls)
        _refuse_undeclared_callbacks(cls)

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
        if isinstance(model, Mapping) and _inline_selection(model.get("provider"), model.get("model")):
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
        """What a run resolves: the invocation's ``model_override`` (a fork's new model) if set, else :meth:`select_model`."""
        override = invocation.model_override
        return cls.select_model(invocation) if override is None else override

    @classmethod
    def result_spec(cls) -> ResultSchema | None:
        return cls._result_spec

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
        run = await _built_off_the_loop(cast("type[Agent]", cls), message, options)
        return await _until_stopped(run, _on_own_thread(run.call, f"lg-ask-{run.id[:8]}"))

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
        runtime = _runtime_for(run_options.get("runtime"))
        # ask("text", ...) and ask(message="text", ...) (the spec's keyword form) are the same request.
        invocation = Invocation(**options) if message is None else Invocation.coerce(message, **options)
        invocation.check_storable()
        run = Run(cls, invocation, runtime, cancellation_token=run_options.get("cancellation_token"), on_event=run_options.get("on_event"))
        run._model = runtime.resolver.resolve(cls.model_selection(invocation), invocation=invocation)
        result_strategy(cls.result_spec(), run._model)  # an unsupported strategy fails here, not in a turn
        check_tools_accepted(run._model, _static_tool_names(cls), cls.__qualname__)  # and so do tools the model refuses
        return prepared_by(run, runtime.hooks)

    # -- run-scoped instance ----------------------------------------------------------------

    def __init__(self, run: Run | None = None, runtime: Any = None, model: Any = None, context: Any = None) -> None:
        self.run = run
        self.runtime = runtime
        # The run's resolved model on the run-scoped instance, as in the spec; the class keeps its selection.
        self.model = model  # type: ignore[misc]
        self.context = context

    @property
    def max_tool_calls(self) -> int:
        """The most tool calls one invocation of this agent may make (``limits["max_tool_calls"]``)."""
        return type(self).limits["max_tool_calls"]

    def tool_registry(self, binding: Any) -> ToolRegistry:
        """The tools available for this step, bound to ``binding``."""
        return ToolRegistry(type(self).tools, binding=binding, reserved=_reserved_tool_names(type(self)))

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
            raise ConfigurationError(f"{cls.__qualname__}.system_prompt must be {_PROMPT_FORMS}")
        prompt = awaited(prompt, f"{cls.__qualname__}.system_prompt")
        if prompt is None or isinstance(prompt, str):
            return prompt
        raise ConfigurationError(
            f"{cls.__qualname__}.system_prompt returned {type(prompt).__name__}; "
            "it must return a string, or None for no system prompt"
        )


class AsyncRunStream:
    """Async iteration over a Run's events; the Run executes on a worker thread."""

    def __init__(self, run: Run) -> None:
        self.run = run

    async def __aiter__(self) -> AsyncIterator[Any]:
        loop = asyncio.get_running_loop()
        events: asyncio.Queue[Any] = asyncio.Queue()
        done = object()
        iterator = iter(self.run)

        def pump() -> None:
            try:
                for event in iterator:
                    loop.call_soon_threadsafe(events.put_nowait, event)
            except BaseException as exc:  # noqa: BLE001 - re-raised in the consumer
                loop.call_soon_threadsafe(events.put_nowait, exc)
            finally:
                loop.call_soon_threadsafe(events.put_nowait, done)

        task = _on_own_thread(pump, f"lg-stream-{self.run.id[:8]}")
        try:
            while True:
                item = await events.get()
                if item is done:
                    break
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            # Stopping at the terminal event stops nothing; cancelling writes the store's flag: not on the loop.
            if not task.done() and not self.run.finished:
                await asyncio.to_thread(self.run.cancel, "the async stream consumer stopped reading")
            await task


def _runtime_for(runtime: Any) -> Any:
    """The ``runtime=`` option, else the active configuration's; TypeError for anything else.

    A Configuration passed by mistake failed later with an AttributeError
    ('no attribute resolver'), far from the call that passed it.
    """
    from lg_core.runtime import (
        Runtime,  # services imports this module's Run
        current_runtime,
    )

    if runtime is None:
        return current_runtime()
    if not isinstance(runtime, Runtime):
        raise TypeError(
            f"runtime must be a Runtime (a configuration's is configuration.runtime()), got {type(runtime).__name__}"
        )
    return runtime


def _on_own_thread(fn: Callable[[], T], name: str) -> asyncio.Future[T]:
    """``fn()`` on a thread of its own (with the caller's context), as a future of the running loop.

    A run can take minutes. On the loop's default executor (``cpu_count + 4``
    threads) a few runs would hold every thread, and every ``asyncio.to_thread``
    of the app, LittleGhost's own store reads, ``cancel_async`` and
    ``interject_async`` included, would wait for one of those runs to end.
    """
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()
    context = contextvars.copy_context()

    def settle(result: Any, error: BaseException | None) -> None:
        if future.cancelled():
            return
        if error is None:
            future.set_result(result)
        else:
            future.set_exception(error)

    def target() -> None:
        try:
            outcome: tuple[Any, BaseException | None] = (context.run(fn), None)
        except BaseException as exc:  # noqa: BLE001 - raised where the future is awaited
            outcome = (None, exc)
        with contextlib.suppress(RuntimeError):  # the loop closed without awaiting the future
            loop.call_soon_threadsafe(settle, *outcome)

    threading.Thread(target=target, name=name, daemon=True).start()
    return future


async def _built_off_the_loop(cls: type[Agent], message: Any, options: dict[str, Any]) -> Run:
    """``cls.build_run(message, **options)`` on a worker thread.

    If the awaiting task is cancelled meanwhile, the build still finishes on its
    thread; the Run it makes never starts, so what its hooks registered
    (``prepare_run``) is closed instead of being left open: by this side if the
    build had finished, else by the thread when it does.
    """
    lock, built, abandoned = threading.Lock(), [], threading.Event()

    def build() -> Run:
        run = cls.build_run(message, **options)
        with lock:
            if not abandoned.is_set():
                built.append(run)
                return run
        _close_unstarted(run)
        return run

    try:
        return await asyncio.to_thread(build)
    except asyncio.CancelledError:
        with lock:
            abandoned.set()
            finished = list(built)
        for run in finished:
            _close_unstarted(run)
        raise


def _close_unstarted(run: Run) -> None:
    """Close a Run nobody will start, on a thread of its own: closers may block, and nobody
    is left to raise their error to."""

    def close() -> None:
        with contextlib.suppress(Exception, *CONTROL_FLOW_ERRORS):
            run.close()

    threading.Thread(target=close, name=f"lg-close-{run.id[:8]}", daemon=True).start()


async def _until_stopped(run: Run, work: Awaitable[Run]) -> Run:
    """Await ``work``, the thread executing ``run``; if the awaiting task is cancelled, cancel the run.

    Without this a dropped web request or an ``asyncio.timeout`` would leave the
    run (and its tools' side effects) going on a thread, with nobody to see its
    outcome. The run is awaited before the CancelledError goes on, so nothing of
    it is still running when the caller's cancellation completes.
    """
    future = asyncio.ensure_future(work)
    try:
        return await asyncio.shield(future)
    except asyncio.CancelledError:
        await asyncio.to_thread(run.cancel, "the task awaiting ask_async was cancelled")
        await asyncio.wait([future])
        raise


def default_agent_id(class_name: str) -> str:
    """``CustomerSupportAgent`` -> ``customer_support``; ``_PrivateAgent`` -> ``private``; ``RéservationAgent`` -> ``reservation``.

    Leading underscores (a private class) are dropped: an agent_id starts with a letter or digit.
    """
    return underscored_name(class_name.lstrip("_"), "agent")


def _declared_id(cls: type, own: Mapping[str, Any]) -> str:
    """The class's agent_id (the spec's Assembly.assembly_id too): declared as either, else derived from its name."""
    if "agent_id" in own and "assembly_id" in own and own["agent_id"] != own["assembly_id"]:
        raise ConfigurationError(f"{cls.__qualname__}: assembly_id and agent_id name the same identifier; declare one of them")
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


def _inline_selection(provider: Any, model: Any) -> bool:
    """An inline mapping's connection name (no ':', which would select another connection) and model id."""
    return isinstance(provider, str) and bool(provider) and ":" not in provider and isinstance(model, str) and bool(model)


def _check_select_model(chooser: Any, owner: str) -> None:
    """``select_model`` is called on the class (before any instance exists), so a plain
    method would fail every ``ask`` with a TypeError about a missing argument."""
    if chooser is None or isinstance(chooser, (classmethod, staticmethod)):
        return
    raise ConfigurationError(
        f"{owner}.select_model must be a classmethod: `@classmethod def select_model(cls, invocation)`"
    )


_PROMPT_FORMS = (
    "a string or a method returning one (or None for no prompt): `def system_prompt(self) -> str | None`, "
    "a @staticmethod taking no arguments or a @classmethod taking cls"
)


def _check_system_prompt(prompt: Any, owner: str) -> None:
    """Fail at class definition, not in every run's first turn, for a prompt that cannot render.

    A method must accept what :meth:`Agent.render_system_prompt` passes: ``self`` for a
    function, nothing for a staticmethod, the class for a classmethod (bound by Python).
    """
    if prompt is None or isinstance(prompt, str):
        return
    arguments: tuple[object, ...]
    if isinstance(prompt, (staticmethod, classmethod)):
        function, arguments = prompt.__func__, (() if isinstance(prompt, staticmethod) else (object,))
    elif callable(prompt):
        function, arguments = prompt, (object(),)
    else:
        raise ConfigurationError(f"{owner}.system_prompt must be {_PROMPT_FORMS}; got {type(prompt).__name__}")
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):  # a builtin or C callable: nothing to check
        return
    try:
        signature.bind(*arguments)
    except TypeError:
        raise ConfigurationError(
            f"{owner}.system_prompt{signature} takes the wrong arguments; it must be {_PROMPT_FORMS}"
        ) from None


def _static_tool_names(cls: type[Agent]) -> list[str]:
    """The tools every run of ``cls`` offers: declared Tool classes without ``available_if``
    (a provider's or a conditional tool's are known only in the run's turns, and checked there)."""
    return [
        declaration.tool_name
        for declaration in cls.tools
        if isinstance(declaration, type) and issubclass(declaration, Tool) and declaration.available_if is None
    ]


def _declaring_bases(cls: type) -> list[type]:
    """The classes whose declarations ``cls`` inherits, base first: Agent classes and plain mixins.

    A mixin (``class Guarded(ApprovalMixin, Agent)``) declares tools, limits and
    callbacks as an Agent class does; skipping it would silently drop a guard.
    """
    return [base for base in reversed(cls.__mro__[1:]) if base is not object]


def _merge_tools(cls: type[Agent]) -> tuple[Any, ...]:
    merged: list[Any] = []
    for base in _declaring_bases(cls):
        if "tools" not in vars(base):
            continue
        if issubclass(base, Agent):
            merged.extend(t for t in base.tools if t not in merged)  # already checked and merged
        else:
            _add_declarations(merged, vars(base)["tools"], base.__qualname__)
    _add_declarations(merged, vars(cls).get("tools", ()), cls.__qualname__)
    _check_unique_tool_names(merged, cls.__qualname__)
    return tuple(merged)


def _add_declarations(merged: list[Any], declared: Any, owner: str) -> None:
    if isinstance(declared, (str, bytes)) or not hasattr(declared, "__iter__"):
        declared = (declared,)
    for declaration in declared:
        check_declaration(declaration, owner)
        if declaration not in merged:
            merged.append(declaration)


def _check_unique_tool_names(declarations: list[Any], owner: str) -> None:
    """Two declared Tool classes with one name fail here, not at the first step of every run.

    Tools are cumulative across inheritance, so a subclass's tool does not replace a
    parent's of the same name: the registry would refuse the pair in each run.
    (A provider's tools are known only then, and checked then.)
    """
    seen: dict[str, type] = {}
    for declaration in declarations:
        if isinstance(declaration, type) and issubclass(declaration, Tool):
            earlier = seen.setdefault(declaration.tool_name, declaration)
            if earlier is not declaration:
                raise ConfigurationError(
                    f"{owner}.tools has two tools named {declaration.tool_name!r}: {earlier.__qualname__} and "
                    f"{declaration.__qualname__} (tools add up across inheritance); set tool_name on one of them"
                )


def _reserved_tool_names(cls: type[Agent]) -> dict[str, str]:
    """Names no tool of ``cls`` may take, with what holds them: the result schema's submit tool.

    The model is offered that tool beside the agent's (strategy ``tool``, or ``auto`` on
    a model without native structured output), and a call to the name is taken as the
    structured result: a same-named application tool would be offered twice and never run.
    With strategy ``provider`` no submit tool is ever offered, so the name stays free.
    """
    spec = cls.result_spec()
    if spec is None or spec.strategy == "provider":
        return {}
    return {spec.tool_name(): f"the submit tool of {cls.__qualname__}'s result_schema {spec.name!r}"}


def _check_reserved_tool_names(cls: type[Agent]) -> None:
    """Fail at class definition for a declared tool class that takes a reserved name.

    Runs for every class, so a result_schema or a tool a subclass adds is checked against
    what it inherits. Providers' tools are known only when a run builds them: the run's
    ToolRegistry refuses those (:meth:`Agent.tool_registry`).
    """
    reserved = _reserved_tool_names(cls)
    for declaration in cls.tools:
        if isinstance(declaration, type) and issubclass(declaration, Tool) and declaration.tool_name in reserved:
            raise ConfigurationError(
                f"{cls.__qualname__}.tools: {declaration.__qualname__} (tool {declaration.tool_name!r}) has the name "
                f"of {reserved[declaration.tool_name]}; set another tool_name on the tool class or another name on the result_schema"
            )


def _merge_limits(cls: type[Agent]) -> dict[str, int]:
    """The defaults, overlaid with the limits each class in the MRO set itself (mixins too), base first.

    Each key then resolves like a class attribute: the class earliest in the MRO
    that set it wins. Overlaying the parents' merged ``limits`` instead would let a
    second parent's copy of a default overwrite a limit the first parent set.
    """
    merged = dict(DEFAULT_LIMITS)
    for base in [*_declaring_bases(cls), cls]:
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
            raise ConfigurationError(f"{owner}.limits has unknown limit {name!r}; known limits: {sorted(DEFAULT_LIMITS)}")
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigurationError(f"{owner}.limits[{name!r}] must be a positive integer, got {value!r}")
    return dict(own)


# The spec's Agent declarations that this project does not build yet, with what each names. As plain
# class attributes they would be accepted and silently ignored (an agent declaring a sandbox would run
# its tools without one), so declaring one fails at class definition instead.
_NOT_SUPPORTED_YET = {
    "sandbox": "sandboxes",
    "workspace": "workspaces",
    "code_mode": "code mode",
    "subagent": "subagents",
    "subagents": "subagents",
    "agent_as_tool": "agents exposed as tools",
    "skills": "skills",
    "manage_context": "context management",
    "system_template": "prompt templates",
    "prompt_local": "prompt templates",
}


def _refuse_unsupported_declarations(cls: type[Agent]) -> None:
    """ConfigurationError for a declaration in :data:`_NOT_SUPPORTED_YET`, made by ``cls`` or a plain
    mixin it inherits from (an Agent base was checked when it was defined)."""
    for base in [cls, *(base for base in _declaring_bases(cls) if not issubclass(base, Agent))]:
        declared = sorted(set(vars(base)) & set(_NOT_SUPPORTED_YET))
        if declared:
            name = declared[0]
            raise ConfigurationError(
                f"{cls.__qualname__} declares {name} (in {base.__qualname__}), but {_NOT_SUPPORTED_YET[name]} "
                f"are not supported yet, so nothing would act on it; remove the declaration"
            )


def _refuse_undeclared_callbacks(cls: type[Agent]) -> None:
    """A method named like a callback (``def before_model(self, payload)``) but not declared as one
    fails at class definition: it would never run. A callback is declared with its decorator."""
    chained = {name for chain in cls._callback_chains.values() for name in chain}
    for name in CALLBACK_NAMES:
        if name in vars(cls) and name not in chained:
            raise ConfigurationError(
                f"{cls.__qualname__}.{name} is not declared as a callback, so it would never run; "
                f"decorate it with @lg_core.{name}"
            )


def _merge_callback_chains(cls: type[Agent]) -> dict[str, tuple[str, ...]]:
    """Every class's callbacks in the MRO (Agent classes and mixins), folded in from the base to ``cls``.

    A class's callbacks run after those of all its bases, as if each called
    ``super()`` first: single inheritance keeps parent-then-child order, and with
    ``class C(A, B)`` B's run, then A's, then C's. Each class is folded in once and
    chains are keyed by method name, so a base shared by two parents (a diamond)
    contributes its callbacks once. Reading only the first parent's chain would
    drop every callback declared on a second parent (a guard that never runs).
    """
    chains: dict[str, tuple[str, ...]] = {}
    for base in [*_declaring_bases(cls), cls]:
        chains = collect(base, chains)
    return chains


__all__ = ["Agent", "AsyncRunStream", "DEFAULT_LIMITS", "default_agent_id"]
