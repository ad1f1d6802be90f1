"""Stream parsing for OpenRouter: the Chat Completions chunks, plus what OpenRouter adds.

The openai package's :class:`ChunkReader` and ``read_stream`` already cope with the
rest of OpenRouter's stream (``: OPENROUTER PROCESSING`` comments are SSE comments; a
chunk with an ``error`` object and ``finish_reason: "error"`` fails the response;
usage comes in the last chunk). This reader also keeps:

* ``reasoning_details``: the structured reasoning that must go back with the assistant
  message (see ``_request``), folded into the Reasoning block's ``details``;
* the response metadata OpenRouter reports: the upstream provider that served it, the
  model's own finish reason, and the usage's cost in credits (``cost``, ``cost_details``,
  ``is_byok``), read by applications from ``message_stop``'s response.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from lg_core.content import Reasoning
from lg_core.events import StreamEvent
from lg_core.providers.openai._stream import ChunkReader

# Detail types whose streamed fragments continue one another (their text arrives in pieces).
_TEXT_FIELDS = {"reasoning.text": "text", "reasoning.summary": "summary"}


class OpenRouterChunkReader(ChunkReader):
    """A ChunkReader that keeps OpenRouter's reasoning details, upstream provider and cost."""

    def __init__(self, target: str, sequence: int) -> None:
        super().__init__(target, sequence)
        self.details: list[dict[str, Any]] = []

    def feed(self, chunk: Mapping[str, Any]) -> Iterator[StreamEvent]:
        if isinstance(chunk.get("provider"), str):
            self.metadata.setdefault("upstream_provider", chunk["provider"])
        if isinstance(chunk.get("usage"), Mapping):
            self.metadata.update(_accounting(chunk["usage"]))
        for choice in chunk.get("choices") or ():
            if isinstance(choice, Mapping) and choice.get("index", 0) == 0:
                self._note_choice(choice)
        yield from super().feed(chunk)

    def _note_choice(self, choice: Mapping[str, Any]) -> None:
        delta = choice.get("delta")
        if isinstance(delta, Mapping):
            merge_details(self.details, delta.get("reasoning_details"))
        if isinstance(choice.get("native_finish_reason"), str):
            self.metadata["native_finish_reason"] = choice["native_finish_reason"]

    def reasoning_block(self) -> Reasoning | None:
        """The reasoning text (from the details' text when no ``reasoning`` delta carried it) and the details."""
        if not self.reasoning and not self.details:
            return None
        text = "".join(self.reasoning) or "".join(_visible_text(detail) for detail in self.details)
        return Reasoning(text=text, details=tuple(self.details) or None)


def merge_details(details: list[dict[str, Any]], fragments: Any) -> None:
    """Add one delta's ``reasoning_details`` to ``details``.

    A text or summary fragment continues the last detail when it has the same type and
    ``index`` (or either has none): its text is appended, and fields the detail lacks
    (the ``signature`` comes with the last fragment) are taken. Other details (encrypted
    reasoning) arrive whole and are kept as they are.
    """
    if not isinstance(fragments, list):
        return
    for fragment in fragments:
        if not isinstance(fragment, Mapping):
            continue
        last = details[-1] if details else None
        field = _TEXT_FIELDS.get(str(fragment.get("type")))
        if field is not None and last is not None and _continues(last, fragment):
            last[field] = f"{last.get(field) or ''}{fragment.get(field) or ''}"
            for key, value in fragment.items():
                if value is not None and last.get(key) is None:
                    last[key] = value
        else:
            details.append(dict(fragment))


def _visible_text(detail: Mapping[str, Any]) -> str:
    field = _TEXT_FIELDS.get(str(detail.get("type")))
    value = detail.get(field) if field else None
    return value if isinstance(value, str) else ""


def _continues(last: Mapping[str, Any], fragment: Mapping[str, Any]) -> bool:
    if last.get("type") != fragment.get("type"):
        return False
    return last.get("index") is None or fragment.get("index") is None or last["index"] == fragment["index"]


def _accounting(usage: Mapping[str, Any]) -> dict[str, Any]:
    """OpenRouter's usage accounting beyond token counts: the cost in credits."""
    found: dict[str, Any] = {}
    cost = usage.get("cost")
    if isinstance(cost, (int, float)) and not isinstance(cost, bool):
        found["cost"] = float(cost)
    if isinstance(usage.get("cost_details"), Mapping):
        found["cost_details"] = dict(usage["cost_details"])
    if isinstance(usage.get("is_byok"), bool):
        found["is_byok"] = usage["is_byok"]
    return found


__all__ = ["OpenRouterChunkReader", "merge_details"]
