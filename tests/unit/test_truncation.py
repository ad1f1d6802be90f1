"""Tool output truncation: within the token budget, UTF-8 intact, both ends kept."""

from __future__ import annotations

import pytest

from lg_core.truncation import APPROX_BYTES_PER_TOKEN, truncate_middle

LONG = "HEAD-" + "x" * 5000 + "-TAIL"


@pytest.mark.parametrize("max_tokens", [1, 2, 5, 10, 20, 50, 1000])
def test_truncated_output_never_exceeds_the_budget(max_tokens):
    """The spec's OutputTruncation "keeps large tool results within a predictable context
    budget": a small max_tool_output_tokens must not be answered with a longer notice."""
    text = truncate_middle(LONG, max_tokens)
    assert len(text.encode("utf-8")) <= max_tokens * APPROX_BYTES_PER_TOKEN


@pytest.mark.parametrize("max_tokens", [5, 10, 20])
def test_a_small_budget_still_shows_both_ends_around_a_marker(max_tokens):
    text = truncate_middle(LONG, max_tokens)
    assert text.startswith("HEAD") and text.endswith("TAIL") and "[...]" in text


def test_a_budget_with_room_names_the_truncation_and_keeps_utf8_whole():
    text = truncate_middle("é" * 3000, 100)
    assert "output truncated: about 1500 tokens" in text
    assert text.startswith("é") and text.endswith("é")
    assert len(text.encode("utf-8")) <= 100 * APPROX_BYTES_PER_TOKEN


def test_text_within_the_budget_is_returned_unchanged():
    assert truncate_middle("short", 2) == "short"
