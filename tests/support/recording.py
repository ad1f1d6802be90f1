"""A scripted model that serves turns in order and keeps every ModelRequest it was sent.

Tests read the requests to check what the engine sent the model: repair
instructions, offered tools, settings.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any


def recording(script: Callable[..., str], turns: Sequence[Any], **options: Any) -> tuple[str, list[Any]]:
    """``(target, requests)``: a scripted model serving ``turns[sequence]``, and the requests it got."""
    requests: list[Any] = []

    def serve(request: Any) -> Any:
        requests.append(request)
        return turns[request.metadata["sequence"]]

    return script(serve, **options), requests
