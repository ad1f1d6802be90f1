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
        self.details = ReasoningDetails()

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
            self.details.add(delta.get("reasoning_details"))
        if isinstance(choice.get("native_finish_reason"), str):
            self.metadata["native_finish_reason"] = choice["native_finish_reason"]

    def reasoning_block(self) -> Reasoning | None:
        """The reasoning text (from the details' text when no ``reasoning`` delta carried it) and the details."""
        if not self.reasoning and not self.details:
            return None
        details = self.details.collected()
        text = "".join(self.reasoning) or "".join(_visible_text(detail) for detail in details)
        return Reasoning(text=text, details=tuple(details) or None)


class ReasoningDetails:
    """One response's ``reasoning_details``, merged as their fragments stream in.

    A text or summary fragment continues the last detail when it has the same type and
    ``index`` (or either has none): its text is added, and fields the detail lacks (the
    ``signature`` comes with the last fragment) are taken. Other details (encrypted
    reasoning) arrive whole and are kept as they are. A continued detail's text is kept
    in pieces and joined once, in :meth:`collected`: appending each fragment to the
    detail's string copied all the reasoning so far, for every fragment.
    """

    def __init__(self) -> None:
        self._details: list[dict[str, Any]] = []
        self._pieces: list[list[str] | None] = []  # per detail: its text's pieces, once a fragment continued it

    def __bool__(self) -> bool:
        return bool(self._details)

    def add(self, fragments: Any) -> None:
        """Add one delta's ``reasoning_details`` (anything but a list of objects adds nothing)."""
        if not isinstance(fragments, list):
            return
        for fragment in fragments:
            if isinstance(fragment, Mapping):
                self._add(fragment)

    def _add(self, fragment: Mapping[str, Any]) -> None:
        last = self._details[-1] if self._details else None
        field = _TEXT_FIELDS.get(str(fragment.get("type")))
        if field is None or last is None or not _continues(last, fragment):
            self._details.append(dict(fragment))
            self._pieces.append(None)
            return
        pieces = self._pieces[-1]
        if pieces is None:
            pieces = self._pieces[-1] = [last.get(field) or ""]
        pieces.append(fragment.get(field) or "")
        for key, value in fragment.items():
            if key != field and value is not None and last.get(key) is None:
                last[key] = value

    def collected(self) -> list[dict[str, Any]]:
        """The merged details, each continued text joined."""
        merged = []
        for detail, pieces in zip(self._details, self._pieces, strict=True):
            field = _TEXT_FIELDS.get(str(detail.get("type")))
            merged.append(detail if pieces is None or field is None else {**detail, field: "".join(pieces)})
        return merged


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


__all__ = ["OpenRouterChunkReader", "ReasoningDetails"]
