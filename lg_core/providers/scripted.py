"""The offline ``scripted`` provider: deterministic turns, no network.

It is a real provider (it streams text in deltas, streams tool-call arguments,
reports usage and raises provider errors), used by ``lg demo``, the tests and
the benchmarks. Register a script, then point an agent at it::

    scripted.register("support-demo", [
        {"tool_calls": [{"name": "help_center_lookup", "arguments": {"topic": "refunds"}}]},
        {"text": "Refunds are available within 30 days."},
    ])

    class SupportAgent(Agent):
        model = "scripted:support-demo"

A turn is a dict with any of ``text``, ``tool_calls``, ``reasoning``,
``structured`` (a value sent as JSON text), ``usage``, ``stop_reason``,
``delay`` (seconds before the first token), ``delta_delay`` (seconds between
text deltas, for a model that takes time to stream; both waits end at the
run's deadline or its cancellation, as an HTTP provider's do), or ``error`` (a message, or a dict
with ``message``, ``kind`` in {"provider", "http", "rate_limit",
"context_window", "protocol"}, ``status`` and ``retryable``). Instead of a
list, ``turns`` may be a callable ``(request) -> dict``.

Turns are consumed in order per conversation: the turn used for a request is
``request.metadata["sequence"]``, the number of model calls the conversation
made before it. The engine derives that number from committed state, so a
model call repeated after a crash gets the same turn again.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from lg_core.content import Reasoning, Text, ToolUse
from lg_core.errors import (
    ContextWindowOverflowError,
    DeadlineExceededError,
    HTTPError,
    ProtocolError,
    ProviderError,
)
from lg_core.events import StreamEvent
from lg_core.messages import Message
from lg_core.models.request import ModelCapabilities, ModelRequest, ModelResponse
from lg_core.providers.base import Provider, tool_use
from lg_core.usage import Usage

Turn = Mapping[str, Any]
Script = Sequence[Turn] | Callable[[ModelRequest], Turn]

_TURN_KEYS = {"text", "tool_calls", "reasoning", "structured", "usage", "stop_reason", "delay", "delta_delay", "error"}
_ERROR_KINDS = {
    "provider": ProviderError,
    "http": HTTPError,
    "rate_limit": HTTPError,
    "context_window": ContextWindowOverflowError,
    "protocol": ProtocolError,
}
_WORD = re.compile(r"\S+\s*|\s+")


class _Registry:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._scripts: dict[str, tuple[Script, ModelCapabilities]] = {}

    def register(self, name: str, turns: Script, capabilities: ModelCapabilities | None) -> None:
        if not isinstance(name, str) or not name or ":" in name:
            raise ValueError(f"a scripted model name must be a non-empty string without ':', got {name!r}")
        if not callable(turns):
            turns = [_validate_turn(turn, index) for index, turn in enumerate(turns)]
        with self._lock:
            self._scripts[name] = (turns, capabilities or ModelCapabilities.permissive())

    def get(self, name: str) -> tuple[Script, ModelCapabilities]:
        with self._lock:
            try:
                return self._scripts[name]
            except KeyError:
                known = ", ".join(sorted(self._scripts)) or "none"
                raise ProviderError(
                    f"no scripted model named {name!r} is registered in this process "
                    f"(registered: {known}); call scripted.register({name!r}, turns) first"
                ) from None

    def unregister(self, name: str) -> None:
        with self._lock:
            self._scripts.pop(name, None)


_REGISTRY = _Registry()


def register(name: str, turns: Script, *, capabilities: ModelCapabilities | Mapping[str, Any] | None = None) -> None:
    """Register (or replace) the script served as model ``scripted:<name>``."""
    if isinstance(capabilities, Mapping):
        capabilities = ModelCapabilities(**{"tools": True, "tool_choice": True, **capabilities})
    _REGISTRY.register(name, turns, capabilities)


def unregister(name: str) -> None:
    _REGISTRY.unregister(name)


def _validate_turn(turn: Any, index: int) -> Turn:
    if not isinstance(turn, Mapping):
        raise ValueError(f"scripted turn {index} must be a dict, got {type(turn).__name__}")
    unknown = set(turn) - _TURN_KEYS
    if unknown:
        raise ValueError(f"scripted turn {index} has unknown keys {sorted(unknown)}; allowed: {sorted(_TURN_KEYS)}")
    if not ({"text", "tool_calls", "structured", "error"} & set(turn)):
        raise ValueError(f"scripted turn {index} needs one of text, tool_calls, structured or error")
    for call in turn.get("tool_calls", ()):
        if not isinstance(call, Mapping) or "name" not in call:
            raise ValueError(f"scripted turn {index}: every tool call needs a name")
    for key in ("delay", "delta_delay"):
        value = turn.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0):
            raise ValueError(f"scripted turn {index}: {key} must be a number of seconds >= 0, got {value!r}")
    return dict(turn)


class ScriptedProvider(Provider):
    """Serves registered scripts; the model id is the script name."""

    adapter = "scripted"

    def capabilities(self, model_id: str) -> ModelCapabilities:
        return _REGISTRY.get(model_id)[1]

    def stream(self, request: ModelRequest, model_id: str) -> Iterator[StreamEvent]:
        script, _ = _REGISTRY.get(model_id)
        sequence = int(request.metadata.get("sequence", 0))
        turn = _pick_turn(script, request, model_id, sequence)
        if turn.get("delay"):
            _pause(request, float(turn["delay"]))
        if "error" in turn:
            raise _error(turn["error"])
        yield from _stream_turn(turn, request, model_id, sequence)


def _pause(request: ModelRequest, seconds: float) -> None:
    """Take time like a model does, but stop as an HTTP provider's wait stops: at once when the run is
    cancelled (CancelledError), and at the run's deadline (DeadlineExceededError), whichever comes first."""
    token = request.cancellation_token
    left = seconds if request.deadline is None else request.deadline.timestamp() - time.time()
    overdue = left < seconds  # the deadline comes first: the pause ends there
    left = max(min(left, seconds), 0.0)
    if token is None:
        time.sleep(left)
    else:
        token.wait(left)
        token.raise_if_cancelled()
    if overdue:
        raise DeadlineExceededError()


def _pick_turn(script: Script, request: ModelRequest, model_id: str, sequence: int) -> Turn:
    if callable(script):
        turn = script(request)
        return _validate_turn(turn, sequence)
    if sequence >= len(script):
        raise ProviderError(
            f"scripted model {model_id!r} has {len(script)} turns but the conversation asked for "
            f"turn {sequence + 1}; add turns to the script"
        )
    return script[sequence]


def _error(spec: Any) -> ProviderError:
    if isinstance(spec, str):
        return ProviderError(spec)
    kind = spec.get("kind", "provider")
    cls = _ERROR_KINDS.get(kind, ProviderError)
    message = spec.get("message", f"scripted {kind} error")
    retryable = bool(spec.get("retryable", kind == "rate_limit"))
    if cls is HTTPError:
        return HTTPError(message, status=spec.get("status", 429 if kind == "rate_limit" else 500), retryable=retryable)
    return cls(message, retryable=retryable)


def _stream_turn(turn: Turn, request: ModelRequest, model_id: str, sequence: int) -> Iterator[StreamEvent]:
    yield StreamEvent.build("message_start", model=f"scripted:{model_id}", sequence=sequence)
    blocks: list[Any] = []
    if turn.get("reasoning"):
        yield StreamEvent.build("reasoning_delta", text=turn["reasoning"])
        blocks.append(Reasoning(text=turn["reasoning"]))
    text = turn.get("text")
    if "structured" in turn:
        text = json.dumps(turn["structured"])
    if text:
        pause = float(turn.get("delta_delay") or 0.0)
        for index, piece in enumerate(_WORD.findall(text)):
            if pause and index:
                _pause(request, pause)
            yield StreamEvent.build("text_delta", text=piece)
        blocks.append(Text(text=text))
    for index, call in enumerate(turn.get("tool_calls", ())):
        tool_use = _tool_use(call, sequence, index)
        yield StreamEvent.build("tool_call_start", id=tool_use.id, name=tool_use.name)
        yield StreamEvent.build("tool_call_delta", id=tool_use.id, arguments=json.dumps(tool_use.input))
        yield StreamEvent.build("tool_call_stop", id=tool_use.id, name=tool_use.name, input=tool_use.input)
        blocks.append(tool_use)
    usage = Usage(**turn["usage"]) if "usage" in turn else _approximate_usage(request, text or "")
    yield StreamEvent.build("usage", usage=usage)
    stop_reason = turn.get("stop_reason") or ("tool_use" if turn.get("tool_calls") else "end_turn")
    response = ModelResponse(
        message=Message(role="assistant", content=blocks),
        stop_reason=stop_reason,
        usage=usage,
        metadata={"model": f"scripted:{model_id}"},
    )
    yield StreamEvent.build("message_stop", stop_reason=stop_reason, response=response)


def _tool_use(call: Mapping[str, Any], sequence: int, index: int) -> ToolUse:
    call_id = call.get("id") or f"call_{sequence}_{index}"
    return tool_use(str(call_id), str(call["name"]), call.get("arguments", {}))


def _approximate_usage(request: ModelRequest, text: str) -> Usage:
    prompt_bytes = _utf8_length(request.system or "") + sum(_utf8_length(m.text) for m in request.messages)
    return Usage(input_tokens=max(1, prompt_bytes // 4), output_tokens=max(1, _utf8_length(text) // 4))


def _utf8_length(text: str) -> int:
    # surrogatepass: a scripted turn may hold text that is not valid Unicode, to test what the store does with it
    return len(text.encode("utf-8", "surrogatepass"))


__all__ = ["ScriptedProvider", "register", "unregister"]
