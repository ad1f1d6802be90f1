"""The README as the tests read it: its fenced code blocks, found by the marker comment before them."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"


@dataclass(frozen=True)
class CodeBlock:
    language: str
    code: str


def marked_blocks(marker: str, path: Path = README) -> list[CodeBlock]:
    """Every fenced block right after an HTML comment starting with ``<!-- marker``, in order.

    The marker is invisible on a rendered page, so the README reads as prose while a test finds
    exactly the blocks it promises to run.
    """
    pattern = re.compile(
        rf"^<!-- {re.escape(marker)}\b[^\n]*-->\n```(\w+)\n(.*?)^```$",
        re.MULTILINE | re.DOTALL,
    )
    return [CodeBlock(language, code) for language, code in pattern.findall(path.read_text())]


def section(title: str, path: Path = README) -> str:
    """The text of the ``##`` or ``###`` section named ``title``, up to the next heading (code blocks,
    whose ``#`` comments are not headings, included)."""
    lines, in_fence, found = [], False, False
    for line in path.read_text().splitlines():
        if line.startswith("```"):
            in_fence = not in_fence
        heading = not in_fence and line.startswith("#")
        if heading and found:
            break
        if found:
            lines.append(line)
        found = found or (heading and line.lstrip("#").strip() == title and line.startswith(("## ", "### ")))
    assert found, f"{path.name} has no section {title!r}"
    return "\n".join(lines)
