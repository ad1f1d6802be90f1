"""Keep large tool output within a token budget without breaking UTF-8.

The byte-to-token estimate is deliberately approximate (4 bytes per token);
use a provider tokenizer when exact accounting matters.
"""

from __future__ import annotations

APPROX_BYTES_PER_TOKEN = 4


def approx_token_count(text: str) -> int:
    return -(-len(text.encode("utf-8")) // APPROX_BYTES_PER_TOKEN)


def truncate_middle(text: str, max_tokens: int) -> str:
    """``text`` if within budget, else its head and tail around a truncation notice."""
    data = text.encode("utf-8")
    budget = max_tokens * APPROX_BYTES_PER_TOKEN
    if len(data) <= budget:
        return text
    notice = f"\n[... output truncated: about {approx_token_count(text)} tokens, showing the first and last parts ...]\n"
    keep = max(budget - len(notice.encode("utf-8")), 0)
    head = data[: keep // 2].decode("utf-8", errors="ignore")
    tail = data[len(data) - keep // 2 :].decode("utf-8", errors="ignore") if keep // 2 else ""
    return head + notice + tail


__all__ = ["APPROX_BYTES_PER_TOKEN", "approx_token_count", "truncate_middle"]
