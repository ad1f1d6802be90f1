"""Keep large tool output within a token budget without breaking UTF-8.

The byte-to-token estimate is deliberately approximate (4 bytes per token);
use a provider tokenizer when exact accounting matters.
"""

from __future__ import annotations

APPROX_BYTES_PER_TOKEN = 4
_SHORT_NOTICE = "\n[...]\n"


def approx_token_count(text: str) -> int:
    return -(-len(text.encode("utf-8")) // APPROX_BYTES_PER_TOKEN)


def truncate_middle(text: str, max_tokens: int) -> str:
    """``text`` if within budget, else its head and tail around a truncation notice."""
    data = text.encode("utf-8")
    budget = max_tokens * APPROX_BYTES_PER_TOKEN
    if len(data) <= budget:
        return text
    notice = _notice(approx_token_count(text), budget)
    keep = budget - len(notice.encode("utf-8"))
    head = data[: keep // 2].decode("utf-8", errors="ignore")
    tail = data[len(data) - keep // 2 :].decode("utf-8", errors="ignore") if keep // 2 else ""
    return head + notice + tail


def _notice(tokens: int, budget: int) -> str:
    """The full notice if it leaves at least half of ``budget`` (bytes) for the text, else a
    short marker, else none: a small budget must not be answered with a longer notice."""
    full = f"\n[... output truncated: about {tokens} tokens, showing the first and last parts ...]\n"
    for notice in (full, _SHORT_NOTICE):
        if 2 * len(notice.encode("utf-8")) <= budget:
            return notice
    return ""


__all__ = ["APPROX_BYTES_PER_TOKEN", "approx_token_count", "truncate_middle"]
