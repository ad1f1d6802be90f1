"""ToolRegistry: the exact set of tools a model may call during one step.

Declarations are Tool classes, Tool instances, nested lists, or provider
classes with a ``tools(binding)`` class method returning any of those (or
None). The registry flattens them, drops tools whose ``available_if`` says no,
binds the rest, and checks that names are valid and unique, and that none takes
a ``reserved`` name (the structured-result submit tool's). Tools it created,
and instances a provider returned (bound to this registry's binding if the
provider left them unbound), are closed once, in reverse order. Instances
passed to the registry directly remain the caller's. ``register`` adds entries
later, all or nothing, and with ``replace=True`` swaps out same-named tools.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from lg_core.errors import CleanupError, ConfigurationError, Error, ToolError
from lg_core.models.request import ToolSpecification
from lg_core.tool import Binding, Tool
from lg_core.tool_declarations import NAME_PATTERN, takes_arguments


def is_tool_provider(value: Any) -> bool:
    return isinstance(value, type) and not issubclass(value, Tool) and callable(getattr(value, "tools", None))


def check_declaration(value: Any, owner: str) -> None:
    """Fail at class definition for a declaration that can never work."""
    if isinstance(value, type) and is_tool_provider(value) and _plain_method(value, "tools"):
        raise ConfigurationError(
            f"{value.__qualname__}.tools must be a classmethod (or staticmethod): the registry calls "
            "it on the class, as `@classmethod def tools(cls, binding)`"
        )
    if isinstance(value, type) and is_tool_provider(value) and not takes_arguments(value.tools, 1):  # type: ignore[attr-defined]  # the binding
        raise ConfigurationError(
            f"{value.__qualname__}.tools must take the binding: the registry calls it as "
            "`@classmethod def tools(cls, binding)`, once per run"
        )
    if isinstance(value, type) and issubclass(value, Tool) and value.call is Tool.call:
        # Every call would tell the model "internal error" and the run would still complete.
        # Checked here, not when a Tool subclass is defined: an abstract base tool is fine.
        raise ConfigurationError(
            f"{owner}.tools: {value.__qualname__} (tool {value.tool_name!r}) does not implement the tool; "
            "it must define call(self, input)"
        )
    if isinstance(value, type) and issubclass(value, Tool) and not value.description:
        # Every registry that builds it would refuse it: fail here, before any run exists.
        raise ConfigurationError(
            f"{owner}.tools: {value.__qualname__} (tool {value.tool_name!r}) needs a description for the model; "
            "set description = '...' on the tool class"
        )
    if isinstance(value, type) and (issubclass(value, Tool) or is_tool_provider(value)):
        return
    raise ConfigurationError(
        f"{owner}.tools entries must be Tool subclasses or provider classes with a "
        f"tools(binding) class method, got {value!r}"
    )


def _check_implemented(tool_class: type[Tool]) -> None:
    """Refuse a tool a provider returned that never defines ``call``: the Agent's class
    definition only saw the provider, and each call would tell the model "internal error"
    while the run still completed."""
    if tool_class.call is Tool.call:
        raise ConfigurationError(
            f"a tool provider returned {tool_class.__qualname__} (tool {tool_class.tool_name!r}), which does not "
            "implement the tool; it must define call(self, input)"
        )


def _plain_method(cls: type, name: str) -> bool:
    """Whether ``cls`` defines (or inherits) ``name`` as an undecorated function: called on
    the class it would take its first argument as ``self``."""
    for base in cls.__mro__:
        if name in vars(base):
            return inspect.isfunction(vars(base)[name])
    return False


class ToolRegistry:
    """Bound tool instances for one binding, by model-visible name."""

    def __init__(
        self,
        declarations: Iterable[Any] = (),
        binding: Binding | None = None,
        *,
        reserved: Mapping[str, str] | None = None,
    ) -> None:
        """``reserved`` maps names no tool may take (the model is offered another tool by
        that name) to what holds them, for the error."""
        self.binding = binding or Binding()
        self._reserved = dict(reserved or {})
        self._tools: dict[str, Tool] = {}
        self._owned: list[Tool] = []
        self._closed = False
        try:
            for tool in self._flatten(declarations):
                self._add(tool)
        except BaseException:
            # Nobody else holds the tools built so far (a duplicate name, a failing provider).
            self._close_quietly()
            raise

    def _flatten(self, values: Iterable[Any], *, provided: bool = False) -> Iterator[Tool]:
        """Tool instances for ``values``; ``provided`` marks what a provider's ``tools(binding)`` returned."""
        for value in values:
            if value is None:
                continue
            if isinstance(value, (list, tuple)):
                yield from self._flatten(value, provided=provided)
            elif isinstance(value, Tool):
                if provided:
                    _check_implemented(type(value))
                yield self._adopt(value) if provided else value
            elif isinstance(value, type) and issubclass(value, Tool):
                if provided:
                    _check_implemented(value)
                if value.available(self.binding):
                    yield self._own(value(binding=self.binding))
            elif is_tool_provider(value):
                yield from self._flatten([value.tools(self.binding)], provided=True)
            else:
                raise ConfigurationError(
                    f"a tool provider returned {value!r}; expected Tool classes, instances, lists or None"
                )

    def _adopt(self, tool: Tool) -> Tool:
        """Bind and own an instance a provider built for this registry.

        The spec's providers "may return Tool classes, Tool instances ...; LittleGhost
        binds every Tool to the current run", and registries close the tools they
        hold for the run. An instance the provider left unbound gets this registry's
        binding; one it bound itself (to the binding it was given, or a copy made
        with ``binding.with_(...)``) keeps it. Instances handed to the registry
        directly, not through a provider, stay the caller's: neither rebound nor closed.
        """
        if tool.binding == Binding():
            tool.binding = self.binding
        return self._own(tool)

    def _own(self, tool: Tool) -> Tool:
        if not any(owned is tool for owned in self._owned):  # closed once, even if returned twice
            self._owned.append(tool)
        return tool

    def _add(self, tool: Tool) -> None:
        _admit(self._tools, tool, self._reserved)

    def register(self, tool: Any, *, replace: bool = False) -> ToolRegistry:
        """Add ``tool`` (any declaration form: a Tool class or instance, a list, a provider) and return self.

        All or nothing: the new entries are validated first (names, and no clash with a
        registered tool unless ``replace``), and a refused entry leaves the registry as it
        was, closing what it built for them. With ``replace`` the same-named tools are
        swapped out, and those this registry owned are closed after that validation, as
        the spec's ToolRegistry#register does.
        """
        if self._closed:
            raise Error("this ToolRegistry is closed; build a new one for another run")
        owned_before = len(self._owned)
        try:
            added = self._validated(list(self._flatten([tool])), replace=replace)
        except BaseException:
            self._close_tools(self._owned[owned_before:])
            del self._owned[owned_before:]
            raise
        replaced = [self._tools[t.tool_name] for t in added if t.tool_name in self._tools]
        for new in added:
            self._tools[new.tool_name] = new
        self._release(replaced)
        return self

    def _validated(self, tools: list[Tool], *, replace: bool) -> list[Tool]:
        """``tools`` once each is valid, unique among themselves and, unless ``replace``, new here."""
        staged: dict[str, Tool] = {} if replace else dict(self._tools)
        for tool in tools:
            try:
                _admit(staged, tool, self._reserved)
            except ConfigurationError as exc:
                if replace or tool.tool_name not in self._tools:
                    raise
                raise ConfigurationError(f"{exc}; or pass replace=True to swap out the registered one") from None
        return tools

    def _release(self, replaced: list[Tool]) -> None:
        """Close the replaced tools this registry owned (others stay their owners'); raise the first failure."""
        mine = [tool for tool in replaced if any(tool is owned for owned in self._owned)]
        self._owned = [owned for owned in self._owned if not any(owned is tool for tool in mine)]
        first = self._close_tools(mine)
        if first is not None:
            raise CleanupError(f"a replaced tool failed to close: {first!r}") from first

    def __iter__(self) -> Iterator[Tool]:
        return iter(self._tools.values())

    def __len__(self) -> int:
        return len(self._tools)

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    @property
    def names(self) -> list[str]:
        return list(self._tools)

    def fetch(self, name: str) -> Tool:
        """The named tool, or a model-visible ToolError naming the available ones."""
        try:
            return self._tools[name]
        except KeyError:
            raise self.unknown_tool(name) from None

    def unknown_tool(self, name: str, *, also_offered: Sequence[str] = ()) -> ToolError:
        """The model-visible error for a call to ``name``, which is not here.

        ``also_offered`` names tools the model was offered besides this registry's
        (the result schema's submit tool), so the list the model reads is complete.
        """
        available = ", ".join([*self._tools, *also_offered]) or "none"
        return ToolError(f"Unknown tool {name!r}. Available tools: {available}.")

    def specifications(self) -> tuple[ToolSpecification, ...]:
        return tuple(tool.specification() for tool in self._tools.values())

    def close(self) -> None:
        """Close every tool this registry created or adopted from a provider, in reverse order; idempotent."""
        first = self._close_quietly()
        if first is not None:
            raise CleanupError(f"a tool failed to close: {first!r}") from first

    def _close_quietly(self) -> BaseException | None:
        """Close the owned tools once; every closer runs and the first failure is returned."""
        if self._closed:
            return None
        self._closed = True
        return self._close_tools(self._owned)

    @staticmethod
    def _close_tools(tools: list[Tool]) -> BaseException | None:
        """Close ``tools`` in reverse order; every closer runs and the first failure is returned."""
        first: BaseException | None = None
        for tool in reversed(tools):
            try:
                tool.close()
            except Exception as exc:  # noqa: BLE001 - every closer runs, the first failure is raised
                first = first or exc
        return first


def _admit(tools: dict[str, Tool], tool: Tool, reserved: Mapping[str, str]) -> None:
    """Add ``tool`` to ``tools`` by name once its name and description are valid and the name is free."""
    name = tool.tool_name
    if not NAME_PATTERN.fullmatch(name):
        raise ConfigurationError(f"tool name {name!r} must be 1-64 letters, digits, '_' or '-'")
    if not tool.description:
        raise ConfigurationError(f"tool {name!r} ({type(tool).__qualname__}) needs a description for the model")
    if name in reserved:
        raise ConfigurationError(
            f"tool {name!r} ({type(tool).__qualname__}) has the name of {reserved[name]}; "
            "set another tool_name on the tool"
        )
    existing = tools.get(name)
    if existing is not None:
        raise ConfigurationError(
            f"two tools are named {name!r}: {type(existing).__qualname__} and {type(tool).__qualname__}; "
            "set tool_name on one of them"
        )
    tools[name] = tool


__all__ = ["ToolRegistry", "check_declaration", "is_tool_provider"]
