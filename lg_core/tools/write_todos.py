"""WriteTodos: the agent's plan, shared with the application and whoever follows the run.

Each call replaces the whole plan. It is kept in the run's working state under
``todos`` (``context.state["todos"]``), which every step commits with its checkpoint:
the plan survives a crash, a worker change and a session that continues the
conversation, and the application reads it from the run's state. Without a run
context (a tool called directly) the plan is kept on the tool instance.

The plan's invariants: a todo keeps the ``id`` it is written with, so ids stay
stable across updates; one written without an id gets a new one (``todo-1``,
``todo-2`` ..., never an id the plan already uses); no id appears twice; titles
are trimmed and may not be blank; and at most one todo is ``in_progress``. A
plan that breaks one is refused with a ToolError and the stored plan is unchanged.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from lg_core.errors import ToolError
from lg_core.tool import Binding, PreparedInput, Tool, ToolOutcome

STATE_KEY = "todos"
STATUSES = ("pending", "in_progress", "completed")
MAX_TODOS = 100
MAX_TITLE = 500


class WriteTodos(Tool):
    tool_name = "write_todos"
    description = (
        "Replace your plan with this full list of todos. Keep each todo's id from the current plan; leave id out "
        "for a new todo. Status is pending, in_progress or completed; at most one todo may be in_progress."
    )
    input_schema = {
        "type": "object",
        "properties": {
            "todos": {
                "type": "array",
                "maxItems": MAX_TODOS,
                "items": {
                    "type": "object",
                    "properties": {
                        "id": {"type": "string", "minLength": 1, "maxLength": 64},
                        "title": {"type": "string", "minLength": 1, "maxLength": MAX_TITLE},
                        "status": {"type": "string", "enum": list(STATUSES)},
                    },
                    "required": ["title", "status"],
                    "additionalProperties": False,
                },
            }
        },
        "required": ["todos"],
        "additionalProperties": False,
    }

    def __init__(self, binding: Binding | None = None) -> None:
        super().__init__(binding)
        self._fallback: list[dict[str, str]] = []
        self._run_state: Any = None

    def execute_prepared(
        self, prepared: PreparedInput, context: Any = None, *, entering: Callable[[], None] | None = None
    ) -> ToolOutcome:
        """As Tool's, remembering whether a run's context came with the call: without one
        the tool gets a fresh context each call, whose state would forget the plan."""
        self._run_state = None if context is None else context.state
        try:
            return super().execute_prepared(prepared, context, entering=entering)
        finally:
            self._run_state = None

    def call(self, input: dict[str, Any]) -> str:
        plan = _checked_plan(input["todos"], self.plan())
        self._store(plan)
        return json.dumps({"todos": plan}, ensure_ascii=False)

    def plan(self) -> list[dict[str, str]]:
        """The stored plan: the run's working state, or this instance's without a context."""
        state = self._run_state
        stored = self._fallback if state is None else state.get(STATE_KEY) or []
        return [dict(todo) for todo in stored]

    def _store(self, plan: list[dict[str, str]]) -> None:
        state = self._run_state
        if state is None:
            self._fallback = plan
        else:
            state[STATE_KEY] = plan


def _checked_plan(todos: list[dict[str, Any]], current: list[dict[str, str]]) -> list[dict[str, str]]:
    given = [todo["id"] for todo in todos if todo.get("id") is not None]
    repeated = sorted({todo_id for todo_id in given if given.count(todo_id) > 1})
    if repeated:
        raise ToolError(f"id {repeated[0]!r} appears twice; each todo appears once")
    taken = {*given, *(todo["id"] for todo in current)}  # a new id never reuses a dropped todo's
    next_number = 1 + max((_number(todo_id) for todo_id in taken), default=0)
    plan: list[dict[str, str]] = []
    for position, todo in enumerate(todos, start=1):
        title = todo["title"].strip()
        if not title:
            raise ToolError(f"todo {position} has a blank title")
        todo_id = todo.get("id")
        if todo_id is None:
            todo_id, next_number = f"todo-{next_number}", next_number + 1
        plan.append({"id": todo_id, "title": title, "status": todo["status"]})
    in_progress = [todo["id"] for todo in plan if todo["status"] == "in_progress"]
    if len(in_progress) > 1:
        raise ToolError(f"{len(in_progress)} todos are in_progress ({', '.join(in_progress)}); at most one may be")
    return plan


def _number(todo_id: str) -> int:
    prefix, _, number = todo_id.partition("-")
    return int(number) if prefix == "todo" and number.isdigit() else 0


__all__ = ["WriteTodos"]
