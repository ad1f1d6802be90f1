"""Text a store cannot hold as given (NUL, lone surrogates, over-long ids) in a run, on both durable stores.

PostgreSQL text cannot hold NUL, and no store, JSON writer or provider takes a
lone surrogate. Before, a model reply or a tool output carrying one failed the
step's commit (on every attempt). Everything the store keeps as JSON escapes
NUL; the one plain text column, the run's ``response``, gets U+FFFD; lone
surrogates become U+FFFD everywhere, surrogate pairs are joined.
"""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from lg_core import Agent, MalformedToolCallError, Message, Run, Tool, ToolError
from lg_core.config import Configuration, with_configuration
from lg_core.providers import scripted
from lg_core.store import RunStore


class BinaryReadTool(Tool):
    description = "Read a file that holds binary data."
    input_schema = {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}

    def call(self, input: dict[str, Any]) -> str:
        return f"{input['path']}: header\x00\x01payload"


class ListDirectoryTool(Tool):
    description = "List a directory whose file names are not all UTF-8."
    input_schema = {"type": "object", "properties": {}}

    def call(self, input: dict[str, Any]) -> list[str]:
        return [os.fsdecode(b"report.txt"), os.fsdecode(b"caf\xe9.txt")]  # 'caf\udce9.txt'


class FailingDecodeTool(Tool):
    description = "Fail with a message that carries a name that is not UTF-8."
    input_schema = {"type": "object", "properties": {}}

    def call(self, input: dict[str, Any]) -> str:
        raise ToolError(f"cannot open {os.fsdecode(b'caf' + bytes([0xE9]))}")


@contextmanager
def _asked(
    url: str, turns: list[dict[str, Any]], tools: list[type[Tool]], message: str
) -> Iterator[tuple[Run, RunStore]]:
    """Ask an agent with these scripted ``turns`` and ``tools`` on a store at ``url``: the Run and the store."""
    model_name = f"text-{uuid.uuid4().hex[:8]}"
    scripted.register(model_name, turns)
    agent: type[Agent] = type("TextAgent", (Agent,), {"model": f"scripted:{model_name}", "tools": tools})
    configuration = Configuration(run_store=url)
    try:
        with with_configuration(configuration):
            yield agent.ask(message), configuration.runtime().store
    finally:
        configuration.close()
        scripted.unregister(model_name)


def _stored_strings(store: RunStore, run: Run) -> list[str]:
    """Every string in the run's stored messages, read back through Message."""
    return [s for m in store.load_messages(f"{run.id}/root") for s in _strings(Message.from_dict(m).to_dict())]


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def test_nul_in_input_tool_output_and_reply_completes_and_the_store_keeps_the_exact_text(durable_url):
    turns = [
        {"tool_calls": [{"name": "binary_read", "arguments": {"path": "a\x00b"}}]},
        {"text": "The file starts with header\x00."},
    ]
    with _asked(durable_url, turns, [BinaryReadTool], "Read a\x00b") as (run, store):
        assert run.outcome == "completed", run.error
        assert run.response == "The file starts with header\x00."
        stored = _stored_strings(store, run)
        assert "Read a\x00b" in stored
        assert "a\x00b: header\x00\x01payload" in stored
        assert "The file starts with header\x00." in stored
        stop = [e for e in store.load_events(run.id) if e.type == "run_stop"]
        assert stop[0].data["response"] == "The file starts with header\x00."
        record = store.load_run(run.id)
        assert (record.status, record.response) == ("completed", "The file starts with header\ufffd.")


@pytest.mark.parametrize(
    ("call_ids", "message"),
    [
        (["call\x00one"], "not 1-128 characters without control characters"),
        (["c" * 129], r"\(length 129\) is not 1-128 characters"),
        (["call_1", "call_1"], "the same tool call id twice"),
    ],
)
def test_tool_call_ids_a_step_key_cannot_hold_fail_the_run_with_malformed_tool_call_error(
    durable_url, call_ids, message
):
    """Before, PostgreSQL refused the step key (NUL, or longer than its column) on every attempt of the turn."""
    calls = [{"id": call_id, "name": "binary_read", "arguments": {"path": "a"}} for call_id in call_ids]
    with _asked(durable_url, [{"tool_calls": calls}, {"text": "unreachable"}], [BinaryReadTool], "Read a") as (
        run,
        store,
    ):
        assert run.outcome == "failed"
        assert isinstance(run.error, MalformedToolCallError)
        assert re.search(message, str(run.error))
        assert store.load_run(run.id).status == "failed"


def test_lone_surrogates_in_tool_output_become_replacement_characters(durable_url):
    """os.fsdecode gives file names that are not UTF-8 as lone surrogates, which no store or provider accepts."""
    turns = [
        {"tool_calls": [{"name": "list_directory", "arguments": {}}, {"name": "failing_decode", "arguments": {}}]},
        {"text": "Two files."},
    ]
    with _asked(durable_url, turns, [ListDirectoryTool, FailingDecodeTool], "What is in the folder?") as (run, store):
        assert run.outcome == "completed", run.error
        stored = _stored_strings(store, run)
        assert '["report.txt", "caf\ufffd.txt"]' in stored
        assert "cannot open caf\ufffd" in stored


def test_a_reply_with_a_split_surrogate_pair_and_a_lone_surrogate_is_stored_well_formed(durable_url):
    """A stream may decode an emoji's two halves from separate JSON escapes; before, the turn's commit failed."""
    turns = [
        {"tool_calls": [{"name": "binary_read", "arguments": {"path": "smile\ud83d\ude00"}}]},
        {"text": "smile \ud83d\ude00 and a lone \udce9"},
    ]
    with _asked(durable_url, turns, [BinaryReadTool], "Say it") as (run, store):
        assert run.outcome == "completed", run.error
        stored = _stored_strings(store, run)
        assert "smile \U0001f600 and a lone \ufffd" in stored
        assert "smile\U0001f600" in stored  # the tool call's argument
        assert store.load_run(run.id).response == "smile \U0001f600 and a lone \ufffd"
        # The live run says the same as the stored one: before, it kept the lone half, which
        # no UTF-8 writer accepts (print, a socket).
        assert run.response == "smile \U0001f600 and a lone \ufffd"
        assert run.result.messages[-1].text == run.response
