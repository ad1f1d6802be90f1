"""The checks an Agent class's declarations pass when the class is defined.

A bad model selection, system prompt, tool list or callback fails at import, naming
the class, instead of in the first turn of every run; what the checks need of the
class (its tools, result schema and callback chains) is read from the class itself.
"""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any

from lg_core.callbacks import CALLBACK_NAMES, collect
from lg_core.code_mode.controls import CONTROL_NAMES
from lg_core.errors import ConfigurationError
from lg_core.tool import Tool
from lg_core.tool_registry import check_declaration

if TYPE_CHECKING:
    from lg_core.agent import Agent


def inline_selection(provider: Any, model: Any) -> bool:
    """An inline mapping's connection name (no ':', which would select another connection) and model id."""
    return (
        isinstance(provider, str) and bool(provider) and ":" not in provider and isinstance(model, str) and bool(model)
    )


def check_select_model(chooser: Any, owner: str) -> None:
    """``select_model`` is called on the class (before any instance exists), so a plain
    method would fail every ``ask`` with a TypeError about a missing argument."""
    if chooser is None or isinstance(chooser, (classmethod, staticmethod)):
        return
    raise ConfigurationError(
        f"{owner}.select_model must be a classmethod: `@classmethod def select_model(cls, invocation)`"
    )


PROMPT_FORMS = (
    "a string or a method returning one (or None for no prompt): `def system_prompt(self) -> str | None`, "
    "a @staticmethod taking no arguments or a @classmethod taking cls"
)


def check_system_prompt(prompt: Any, owner: str) -> None:
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
        raise ConfigurationError(f"{owner}.system_prompt must be {PROMPT_FORMS}; got {type(prompt).__name__}")
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):  # a builtin or C callable: nothing to check
        return
    try:
        signature.bind(*arguments)
    except TypeError:
        raise ConfigurationError(
            f"{owner}.system_prompt{signature} takes the wrong arguments; it must be {PROMPT_FORMS}"
        ) from None


def static_tool_names(cls: type[Agent]) -> list[str]:
    """The tools every run of ``cls`` offers: declared Tool classes without ``available_if``
    (a provider's or a conditional tool's are known only in the run's turns, and checked there)."""
    return [
        declaration.tool_name
        for declaration in cls.tools
        if isinstance(declaration, type) and issubclass(declaration, Tool) and declaration.available_if is None
    ]


def declaring_bases(cls: type) -> list[type]:
    """The classes whose declarations ``cls`` inherits, base first: Agent classes and plain mixins.

    A mixin (``class Guarded(ApprovalMixin, Agent)``) declares tools, limits and
    callbacks as an Agent class does; skipping it would silently drop a guard.
    """
    return [base for base in reversed(cls.__mro__[1:]) if base is not object]


def add_declarations(merged: list[Any], declared: Any, owner: str) -> None:
    if isinstance(declared, (str, bytes)) or not hasattr(declared, "__iter__"):
        declared = (declared,)
    for declaration in declared:
        check_declaration(declaration, owner)
        if declaration not in merged:
            merged.append(declaration)


def check_unique_tool_names(declarations: list[Any], owner: str) -> None:
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


def reserved_tool_names(cls: type[Agent]) -> dict[str, str]:
    """Names no tool of ``cls`` may take, with what holds them: the code-mode controls and the
    result schema's submit tool.

    The model is offered that tool beside the agent's (strategy ``tool``, or ``auto`` on
    a model without native structured output), and a call to the name is taken as the
    structured result: a same-named application tool would be offered twice and never run.
    With strategy ``provider`` no submit tool is ever offered, so the name stays free.
    """
    reserved: dict[str, str] = {}
    if cls.code_mode_options() is not None:  # the controls the model is offered in code mode
        reserved.update({name: "a code-mode control" for name in sorted(CONTROL_NAMES)})
    spec = cls.result_spec()
    if spec is None or spec.strategy == "provider":
        return reserved
    reserved[spec.tool_name()] = f"the submit tool of {cls.__qualname__}'s result_schema {spec.name!r}"
    return reserved


def check_reserved_tool_names(cls: type[Agent]) -> None:
    """Fail at class definition for a declared tool class that takes a reserved name.

    Runs for every class, so a result_schema or a tool a subclass adds is checked against
    what it inherits. Providers' tools are known only when a run builds them: the run's
    ToolRegistry refuses those (:meth:`Agent.tool_registry`).
    """
    reserved = reserved_tool_names(cls)
    for declaration in cls.tools:
        if isinstance(declaration, type) and issubclass(declaration, Tool) and declaration.tool_name in reserved:
            raise ConfigurationError(
                f"{cls.__qualname__}.tools: {declaration.__qualname__} (tool {declaration.tool_name!r}) has the name "
                f"of {reserved[declaration.tool_name]}; "
                "set another tool_name on the tool class or another name on the result_schema"
            )


def refuse_undeclared_callbacks(cls: type[Agent]) -> None:
    """A method named like a callback (``def before_model(self, payload)``) but not declared as one
    fails at class definition: it would never run. A callback is declared with its decorator."""
    chained = {name for chain in cls._callback_chains.values() for name in chain}
    for name in CALLBACK_NAMES:
        if name in vars(cls) and name not in chained:
            raise ConfigurationError(
                f"{cls.__qualname__}.{name} is not declared as a callback, so it would never run; "
                f"decorate it with @lg_core.{name}"
            )


def merge_callback_chains(cls: type[Agent]) -> dict[str, tuple[str, ...]]:
    """Every class's callbacks in the MRO (Agent classes and mixins), folded in from the base to ``cls``.

    A class's callbacks run after those of all its bases, as if each called
    ``super()`` first: single inheritance keeps parent-then-child order, and with
    ``class C(A, B)`` B's run, then A's, then C's. Each class is folded in once and
    chains are keyed by method name, so a base shared by two parents (a diamond)
    contributes its callbacks once. Reading only the first parent's chain would
    drop every callback declared on a second parent (a guard that never runs).
    """
    chains: dict[str, tuple[str, ...]] = {}
    for base in [*declaring_bases(cls), cls]:
        chains = collect(base, chains)
    return chains


__all__ = [
    "PROMPT_FORMS",
    "add_declarations",
    "check_reserved_tool_names",
    "check_select_model",
    "check_system_prompt",
    "check_unique_tool_names",
    "declaring_bases",
    "inline_selection",
    "merge_callback_chains",
    "refuse_undeclared_callbacks",
    "reserved_tool_names",
    "static_tool_names",
]
