"""OpenRouter's streaming format for provider tests, on the shared local server (``sse_server``).

OpenRouter streams Chat Completions chunks (https://openrouter.ai/docs/api-reference/streaming),
encoded as ``openai_server`` encodes them, with its own additions, which these builders
reproduce: ``provider`` (the upstream that serves the request) on every chunk and
``native_finish_reason`` beside ``finish_reason``; ``reasoning`` and ``reasoning_details``
in deltas; SSE comments (``: OPENROUTER PROCESSING``) while the request waits for a model;
the usage, with its ``cost`` in credits, in the last chunk (usage accounting is always on);
and an error that happens after the stream began as a chunk carrying an ``error`` object
and ``finish_reason: "error"``. Error answers before the stream are
``{"error": {"code", "message", "metadata"}}`` with the same status. The API lives
under ``/api/v1``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from tests.providers.sse_server import FakeServer, Reply, json_reply

PROCESSING = b": OPENROUTER PROCESSING\n\n"
CHUNK_BASE = {
    "id": "gen-1741570283-Uj9tQv3XwZrPn0sYkLmB",
    "provider": "OpenAI",
    "model": "openai/gpt-5.6-luna",
    "object": "chat.completion.chunk",
    "created": 1741570283,
}


def chunk(
    delta: dict[str, Any] | None = None, finish_reason: str | None = None, *, native: str | None = None
) -> dict[str, Any]:
    choice = {
        "index": 0,
        "delta": delta if delta is not None else {"role": "assistant", "content": ""},
        "finish_reason": finish_reason,
        "native_finish_reason": native or finish_reason,
        "logprobs": None,
    }
    return {**CHUNK_BASE, "choices": [choice]}


def usage_chunk(
    prompt: int, completion: int, *, cost: float = 0.0, cached: int = 0, reasoning: int = 0
) -> dict[str, Any]:
    """The last chunk: an empty delta and the usage, cost included."""
    usage = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "cost": cost,
        "is_byok": False,
        "prompt_tokens_details": {"cached_tokens": cached, "audio_tokens": 0},
        "cost_details": {"upstream_inference_cost": None},
        "completion_tokens_details": {"reasoning_tokens": reasoning, "image_tokens": 0},
    }
    return {**chunk(), "usage": usage}


def text_chunks(*pieces: str, usage: tuple[int, int] = (12, 5), cost: float = 0.0001) -> list[dict[str, Any]]:
    return [
        chunk(),
        *(chunk({"role": "assistant", "content": piece}) for piece in pieces),
        chunk({"role": "assistant", "content": ""}, "stop"),
        usage_chunk(*usage, cost=cost),
    ]


def reasoning_chunk(text: str, **detail: Any) -> dict[str, Any]:
    """A reasoning delta as OpenRouter sends it: the text, and the same text as a ``reasoning_details`` fragment."""
    fragment = {"type": "reasoning.text", "text": text, "format": "anthropic-claude-v1", "index": 0, **detail}
    return chunk({"role": "assistant", "content": "", "reasoning": text, "reasoning_details": [fragment]})


def tool_call_chunks(call_id: str, name: str, fragments: list[str]) -> list[dict[str, Any]]:
    first = {"index": 0, "id": call_id, "type": "function", "function": {"name": name, "arguments": ""}}
    return [
        chunk({"role": "assistant", "content": None, "tool_calls": [first]}),
        *(
            chunk({"role": "assistant", "tool_calls": [{"index": 0, "function": {"arguments": piece}}]})
            for piece in fragments
        ),
        chunk({"role": "assistant", "content": ""}, "tool_calls"),
        usage_chunk(40, 18, cost=0.0003),
    ]


def error_chunk(message: str, code: int | str, **metadata: Any) -> dict[str, Any]:
    """An error after the stream began: the ``error`` object, and the choice finished with ``error``."""
    error = {"code": code, "message": message, **({"metadata": metadata} if metadata else {})}
    return {**chunk({"role": "assistant", "content": ""}, "error"), "error": error}


def error(status: int, message: str, *, headers: dict[str, str] | None = None, **metadata: Any) -> Reply:
    """An OpenRouter error answer: ``{"error": {"code": status, "message", "metadata"}}`` with that status."""
    body: dict[str, Any] = {"error": {"code": status, "message": message}, "user_id": "user_2abc"}
    if metadata:
        body["error"]["metadata"] = metadata
    return json_reply(status, body, headers=headers)


def serve() -> Iterator[FakeServer]:
    unqueued = lambda: error(500, "the test queued no reply for this request")  # noqa: E731
    yield from FakeServer(base_path="/api/v1", unqueued=unqueued, name="fake-openrouter").serve()
