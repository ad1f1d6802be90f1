"""An Agent with several parents (Agent classes or plain mixins) keeps every parent's callbacks, limits and tools.

Callbacks run base first, in reverse MRO order (each class after all its
bases, as if each called ``super()`` first); limits resolve per key like class
attributes (the class earliest in the MRO that set one wins).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import pytest

from lg_core import (
    DEFAULT_LIMITS,
    Agent,
    ConfigurationError,
    Tool,
    before_model,
    before_tool,
    cancel,
)

DELETE_TURNS = [
    {"tool_calls": [{"name": "delete", "id": "call_1", "arguments": {}}]},
    {"text": "Done."},
]


class DeleteTool(Tool):
    description = "Delete everything."
    deleted: list[str] = []

    def call(self, input):
        DeleteTool.deleted.append("deleted")
        return "deleted"


class LookupTool(Tool):
    description = "Look up."

    def call(self, input):
        return "found"


def chains(agent_class):
    return {name: chain for name, chain in agent_class.callback_chains().items() if chain}


# -- callbacks ---------------------------------------------------------------------------


def test_callbacks_of_a_second_agent_parent_are_kept_base_first():
    class Logging(Agent):
        @before_model
        def log_model(self, payload):
            pass

    class Guarded(Agent):
        @before_tool
        def deny_all(self, payload):
            return cancel("Tools are disabled.")

        @before_model
        def check_model(self, payload):
            pass

    class Support(Logging, Guarded):
        @before_model
        def own_model(self, payload):
            pass

    assert chains(Support) == {
        "before_model": ("check_model", "log_model", "own_model"),
        "before_tool": ("deny_all",),
    }


def test_a_guard_declared_on_the_second_parent_blocks_a_tool_in_a_real_run(config, script):
    DeleteTool.deleted.clear()
    seen = []

    class Logging(Agent):
        @before_model
        def log_model(self, payload):
            seen.append("log_model")

    class Guarded(Agent):
        @before_tool
        def deny_all(self, payload):
            seen.append("guard")
            return cancel("Tools are disabled.")

    class Support(Logging, Guarded):
        model = script(DELETE_TURNS)
        tools = [DeleteTool]

    run = Support.ask("Delete it all")

    assert run.outcome == "completed"
    assert DeleteTool.deleted == []
    assert seen == ["log_model", "guard", "log_model"]
    result = run.result.messages[2].tool_results[0]
    assert (result.status, result.text) == ("error", "Tools are disabled.")


def test_a_diamond_runs_the_shared_base_callback_once(config, script):
    seen = []

    class Base(Agent):
        @before_model
        def base_model(self, payload):
            seen.append("base")

    class Left(Base):
        @before_model
        def left_model(self, payload):
            seen.append("left")

    class Right(Base):
        @before_model
        def right_model(self, payload):
            seen.append("right")

    class Diamond(Left, Right):
        model = script([{"text": "ok"}])

    assert chains(Diamond) == {"before_model": ("base_model", "right_model", "left_model")}
    assert Diamond.ask("Hi").outcome == "completed"
    assert seen == ["base", "right", "left"]


def test_single_inheritance_callback_order_is_unchanged():
    class Parent(Agent):
        @before_model
        def first(self, payload):
            pass

        @before_model
        def second(self, payload):
            pass

    class Child(Parent):
        @before_model
        def own(self, payload):
            pass

        @before_model(prepend=True)
        def early(self, payload):
            pass

        @before_model
        def first(self, payload):  # redeclared: moves to the end of the chain
            pass

    assert chains(Parent) == {"before_model": ("first", "second")}
    assert chains(Child) == {"before_model": ("early", "second", "own", "first")}


# -- limits ------------------------------------------------------------------------------


def test_limits_set_by_either_parent_are_kept():
    class Cautious(Agent):
        limits = {"max_tool_calls": 3}

    class Short(Agent):
        limits = {"max_turns": 5}

    class Both(Short, Cautious):
        pass

    class Sub(Cautious):
        pass

    class Both2(Short, Sub):
        pass

    expected = {**DEFAULT_LIMITS, "max_turns": 5, "max_tool_calls": 3}
    assert Both.limits == expected
    assert Both2.limits == expected


def test_the_earlier_parent_wins_a_limit_both_set_and_the_class_wins_over_both():
    class Strict(Agent):
        limits = {"max_turns": 2, "max_tool_calls": 1}

    class Loose(Agent):
        limits = {"max_turns": 50, "max_tool_output_tokens": 500}

    class StrictFirst(Strict, Loose):
        pass

    class LooseFirst(Loose, Strict):
        pass

    class Own(Strict, Loose):
        limits = {"max_turns": 9}

    assert StrictFirst.limits == {"max_turns": 2, "max_tool_calls": 1, "max_tool_output_tokens": 500}
    assert LooseFirst.limits == {"max_turns": 50, "max_tool_calls": 1, "max_tool_output_tokens": 500}
    assert Own.limits == {"max_turns": 9, "max_tool_calls": 1, "max_tool_output_tokens": 500}


def test_single_inheritance_limits_are_unchanged():
    class Parent(Agent):
        limits = {"max_turns": 5}

    class Child(Parent):
        limits = {"max_tool_calls": 3}

    class Grandchild(Child):
        pass

    assert Grandchild.limits == {**DEFAULT_LIMITS, "max_turns": 5, "max_tool_calls": 3}
    assert DEFAULT_LIMITS["max_turns"] == 32


# -- tools -------------------------------------------------------------------------------


def test_tools_of_both_parents_are_kept():
    class Deleting(Agent):
        tools = [DeleteTool]

    class Looking(Agent):
        tools = [LookupTool]

    class Both(Deleting, Looking):
        pass

    assert set(Both.tools) == {DeleteTool, LookupTool}


# -- plain mixins ------------------------------------------------------------------------------


class ApprovalMixin:
    """A reusable guard written as a plain mixin, not an Agent subclass."""

    @before_tool
    def require_approval(self, payload):
        return cancel("Needs human approval.")


class DeletingMixin:
    tools: ClassVar[Sequence[Any]] = [DeleteTool]
    limits: ClassVar[Mapping[str, int]] = {"max_turns": 3}


def test_a_guard_declared_on_a_plain_mixin_blocks_a_tool_in_a_real_run(config, script):
    DeleteTool.deleted.clear()

    class Guarded(ApprovalMixin, Agent):
        model = script(DELETE_TURNS)
        tools = [DeleteTool]

    run = Guarded.ask("Delete it all.")

    assert chains(Guarded) == {"before_tool": ("require_approval",)}
    assert run.completed
    assert run.result.messages[2].tool_results[0].content[0].text == "Needs human approval."
    assert DeleteTool.deleted == []


def test_tools_and_limits_declared_on_a_plain_mixin_are_inherited():
    class Cleaner(DeletingMixin, Agent):
        tools = [LookupTool]

    class Stricter(Cleaner):
        limits = {"max_turns": 2}

    assert Cleaner.tools == (DeleteTool, LookupTool)
    assert Cleaner.limits == {**DEFAULT_LIMITS, "max_turns": 3}
    assert Stricter.limits == {**DEFAULT_LIMITS, "max_turns": 2}


def test_a_plain_mixin_with_bad_declarations_fails_at_class_definition_naming_it():
    class BadLimits:
        limits = {"max_turns": 0}

    class BadTools:
        tools = ["not a tool"]

    with pytest.raises(ConfigurationError, match=r"BadLimits.limits\['max_turns'\] must be a positive integer"):

        class _LimitedAgent(BadLimits, Agent):
            pass

    with pytest.raises(ConfigurationError, match="BadTools"):

        class _ToolAgent(BadTools, Agent):
            pass
