"""ProgramResult: one observation of a code-mode program."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

Status = Literal["completed", "still_working", "terminated", "error"]
FINAL_STATUSES = frozenset({"completed", "terminated", "error"})


@dataclass(frozen=True)
class ProgramResult:
    """What ``exec``, ``wait`` or ``stop`` observed.

    ``output`` is the text produced since the previous observation. ``value`` is the
    completed program's value (its final expression or what it passed to ``finish``).
    ``error`` is a model-program error (its traceback, or the limit it crossed) for an
    ``error`` result; host and cleanup failures raise instead of becoming a result.
    """

    output: str = ""
    value: Any = None
    status: Status = "completed"
    error: str | None = None
    artifacts: tuple[Any, ...] = field(default=())
    output_truncated: bool = False

    @property
    def completed(self) -> bool:
        return self.status == "completed"

    @property
    def still_working(self) -> bool:
        return self.status == "still_working"

    def to_dict(self) -> dict[str, Any]:
        """The JSON the model receives from the control tools."""
        result: dict[str, Any] = {"status": self.status, "output": self.output}
        if self.status == "completed":
            result["value"] = self.value
        if self.error is not None:
            result["error"] = self.error
        if self.output_truncated:
            result["output_truncated"] = True
        return result


__all__ = ["FINAL_STATUSES", "ProgramResult", "Status"]
