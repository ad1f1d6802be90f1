"""Text a store cannot hold as given (NUL, lone surrogates, over-long ids) in a run, on both durable stores.

PostgreSQL text cannot hold NUL: before, a model reply containing one failed
the run's final commit on every attempt. Everything the store keeps as JSON
escapes it; the one plain text column, the run's ``response``, gets U+FFFD.
"""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from lg_core import Agent, MalformedToolCallError, Message, Tool, ToolError
from lg_core.config import Configuration, with_configuration
from lg_core.providers import scripted


class BinaryReadTool(Tool):
    description = "Read a file that holds binary data."
    input_schema = {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}

    def call(self, input: dict[str, Any]) -> str:
        return f"{input['path']}: header\x00\x01payload"


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
    model_name = f"nul-{uuid.uuid4().hex[:8]}"
    scripted.register(
        model_name,
        [
            {"tool_calls": [{"name": "binary_read", "arguments": {"path": "a\x00b"}}]},
            {"text": "The file starts with header\x00."},
        ],
    )
    agent = type("BinaryAgent", (Agent,), {"model": f"scripted:{model_name}", "tools": [BinaryReadTool]})
    configuration = Configuration(run_store=durable_url)
    try:
        with with_configuration(configuration):
            run = agent.ask("Read a\x00b")
            assert run.outcome == "completed", run.error
            assert run.response == "The file starts with header\x00."
            store = configuration.runtime().store
            stored = [s for m in store.load_messages(f"{run.id}/root") for s in _strings(Message.from_dict(m).to_dict())]
            assert "Read a\x00b" in stored
            assert "a\x00b: header\x00\x01payload" in stored
            assert "The file starts with header\x00." in stored
            stop = [e for e in store.load_events(run.id) if e.type == "run_stop"]
            assert stop[0].data["response"] == "The file starts with header\x00."
            record = store.load_run(run.id)
            assert (record.status, record.response) == ("completed", "The file starts with header\ufffd.")
    finally:
        configuration.close()
        scripted.unregister(model_name)


@pytest.mark.parametrize(
    ("call_ids", "message"),
    [
        (["call\x00one"], "not 1-128 characters without control characters"),
        (["c" * 129], r"\(length 129\) is not 1-128 characters"),
        (["call_1", "call_1"], "the same tool call id twice"),
    ],
)
def test_tool_call_ids_a_step_key_cannot_hold_fail_the_run_with_malformed_tool_call_error(durable_url, call_ids, message):
    """Before, PostgreSQL refused the step key (NUL, or longer than its column) on every attempt of the turn."""
    model_name = f"ids-{uuid.uuid4().hex[:8]}"
    calls = [{"id": call_id, "name": "binary_read", "arguments": {"path": "a"}} for call_id in call_ids]
    scripted.register(model_name, [{"tool_calls": calls}, {"text": "unreachable"}])
    agent = type("IdAgent", (Agent,), {"model": f"scripted:{model_name}", "tools": [BinaryReadTool]})
    configuration = Configuration(run_store=durable_url)
    try:
        with with_configuration(configuration):
            run = agent.ask("Read a")
            assert run.outcome == "failed"
            assert isinstance(run.error, MalformedToolCallError)
            assert re.search(message, str(run.error))
            assert configuration.runtime().store.load_run(run.id).status == "failed"
    finally:
        configuration.close()
        scripted.unregister(model_name)


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


def test_lone_surrogates_in_tool_output_become_replacement_characters(durable_url):
    """os.fsdecode gives file names that are not UTF-8 as lone surrogates, which no store or provider accepts.

    Before, the run failed at the tool call's commit with a UnicodeEncodeError.
    """
    model_name = f"fs-{uuid.uuid4().hex[:8]}"
    scripted.register(
        model_name,
        [
            {"tool_calls": [{"name": "list_directory", "arguments": {}}, {"name": "failing_decode", "arguments": {}}]},
            {"text": "Two files."},
        ],
    )
    agent = type("FilesAgent", (Agent,), {"model": f"scripted:{model_name}", "tools": [ListDirectoryTool, FailingDecodeTool]})
    configuration = Configuration(run_store=durable_url)
    try:
        with with_configuration(configuration):
            run = agent.ask("What is in the folder?")
            assert run.outcome == "completed", run.error
            store = configuration.runtime().store
            stored = [s for m in store.load_messages(f"{run.id}/root") for s in _strings(Message.from_dict(m).to_dict())]
            assert '["report.txt", "caf\ufffd.txt"]' in stored
            assert "cannot open caf\ufffd" in stored
    finally:
        configuration.close()
        scripted.unregister(model_name)


def test_a_reply_with_a_split_surrogate_pair_and_a_lone_surrogate_is_stored_well_formed(durable_url):
    """A stream may decode an emoji's two halves from separate JSON escapes; before, the turn's commit failed."""
    model_name = f"sp-{uuid.uuid4().hex[:8]}"
    scripted.register(
        model_name,
        [
            {"tool_calls": [{"name": "binary_read", "arguments": {"path": "smile\ud83d\ude00"}}]},
            {"text": "smile \ud83d\ude00 and a lone \udce9"},
        ],
    )
    agent = type("SmileAgent", (Agent,), {"model": f"scripted:{model_name}", "tools": [BinaryReadTool]})
    configuration = Configuration(run_store=durable_url)
    try:
        with with_configuration(configuration):
            run = agent.ask("Say it")
            assert run.outcome == "completed", run.error
            store = configuration.runtime().store
            stored = [s for m in store.load_messages(f"{run.id}/root") for s in _strings(Message.from_dict(m).to_dict())]
            assert "smile \U0001f600 and a lone \ufffd" in stored
            assert "smile\U0001f600" in stored  # the tool call's argument
            assert store.load_run(run.id).response == "smile \U0001f600 and a lone \ufffd"
    finally:
        configuration.close()
        scripted.unregister(model_name)
