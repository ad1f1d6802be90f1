"""Thought signatures and call ids: what a Gemini answer carries that must come back unchanged.

A ``thoughtSignature`` may sit on any part of an answer: on a function call (the
first of parallel calls; Gemini 3 refuses the next request without it), on a text
part (in a stream, often an empty one at the end), or on a thought. Our content
blocks have no field for a signature on text or a tool call, so the stream parser
keeps each one as a Reasoning block placed just before the block of its part,
with the signature in ``details`` (not ``signature``: another provider's adapter
must not mistake it for its own, and the Anthropic adapter sends every signed
Reasoning block back). The request builder puts it back on that part.

Gemini before 3.5 gives function calls no id; the parser makes one from the
model call's sequence number and the call's position (stable across a resume),
and the request builder leaves such ids out, sending only ids Gemini issued.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Literal

from lg_core.content import Reasoning

SIGNATURE_TYPE = "gemini.thought_signature"
GENERATED_ID_PREFIX = "gemini_call_"
Part = Literal["text", "thought", "functionCall"]


@dataclasses.dataclass(frozen=True)
class Signature:
    """One part's signature, and the kind of part it came on."""

    value: str
    part: Part

    def block(self) -> Reasoning:
        """The Reasoning block that keeps it in a message (no text, so it streams nothing)."""
        return Reasoning(details=({"type": SIGNATURE_TYPE, "part": self.part, "signature": self.value},))

    def fits(self, part: dict[str, Any]) -> bool:
        """Whether ``part`` (as sent) is of the kind this signature came on."""
        if self.part == "functionCall":
            return "functionCall" in part
        return "text" in part and bool(part.get("thought")) == (self.part == "thought")

    def on(self, part: dict[str, Any]) -> dict[str, Any]:
        return {**part, "thoughtSignature": self.value}

    def alone(self) -> dict[str, Any]:
        """The signature on an empty part of its kind, as Gemini streams a signature that closes a text."""
        part: dict[str, Any] = {"text": ""}
        if self.part == "thought":
            part["thought"] = True
        return self.on(part)


def signature_of(block: Reasoning) -> Signature | None:
    """The Gemini signature ``block`` keeps, or None for any other reasoning."""
    for detail in block.details or ():
        if detail.get("type") == SIGNATURE_TYPE and isinstance(detail.get("signature"), str):
            part = detail.get("part")
            return Signature(detail["signature"], part if part in ("thought", "functionCall") else "text")
    return None


def generated_id(sequence: int, index: int) -> str:
    """The id of the ``index``-th call without an id in model call ``sequence``."""
    return f"{GENERATED_ID_PREFIX}{sequence}_{index}"


def is_generated_id(call_id: str) -> bool:
    return call_id.startswith(GENERATED_ID_PREFIX)


__all__ = ["GENERATED_ID_PREFIX", "SIGNATURE_TYPE", "Signature", "generated_id", "is_generated_id", "signature_of"]
