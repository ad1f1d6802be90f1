"""Usage: provider-independent token accounting.

Input, output, cache and reasoning counts stay separate so applications can
aggregate them without double-counting. Invalid or negative values become 0.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, field_validator

FIELDS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens", "reasoning_tokens")
_ALL_SET = frozenset(FIELDS)


class Usage(BaseModel):
    """Normalized token counts for one or more model responses."""

    model_config = ConfigDict(frozen=True, extra="ignore")
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_tokens: int = 0

    def __init__(self, **counts: Any) -> None:
        """Refuse a name that is not one of the five counts (``prompt_tokens``, a typo).

        It would otherwise be dropped, and the usage recorded as zero without a word.
        Stored dicts go through :meth:`from_dict`, which keeps only the known names.
        """
        unknown = sorted(set(counts) - set(FIELDS))
        if unknown:
            raise TypeError(f"Usage() got unknown token counts {unknown}; the counts are {list(FIELDS)}")
        super().__init__(**counts)

    @field_validator(*FIELDS, mode="before")
    @classmethod
    def _non_negative(cls, value: Any) -> int:
        try:
            number = int(value)
        except (TypeError, ValueError, OverflowError):
            return 0
        return max(number, 0)

    def __add__(self, other: Usage) -> Usage:
        if not isinstance(other, Usage):
            return NotImplemented
        # Both sides are already normalized; skip validation on this hot path.
        mine, theirs = self.__dict__, other.__dict__
        return _trusted({name: mine[name] + theirs[name] for name in FIELDS})

    @property
    def total_tokens(self) -> int:
        return sum(getattr(self, name) for name in FIELDS)

    def to_dict(self) -> dict[str, int]:
        """Every field plus ``total_tokens``."""
        data = {name: getattr(self, name) for name in FIELDS}
        data["total_tokens"] = sum(data.values())  # == self.total_tokens, without reading the fields again
        return data

    to_h = to_dict

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> Usage:
        source = data or {}
        values = {name: source.get(name, 0) for name in FIELDS}
        if cls is Usage and all(type(v) is int and v >= 0 for v in values.values()):
            return _trusted(values)
        return cls(**{k: v for k, v in source.items() if k in FIELDS})


def _trusted(counts: dict[str, int]) -> Usage:
    """A Usage of ``counts``, which hold every field as a non-negative int already.

    It sets the same attributes ``model_construct`` sets, without its per-field
    defaults pass: the engine builds several Usages per step (adding a model call's,
    reading a stored total), and ``model_construct`` costs about four times this.
    """
    usage = Usage.__new__(Usage)
    object.__setattr__(usage, "__dict__", counts)
    object.__setattr__(usage, "__pydantic_fields_set__", set(_ALL_SET))
    object.__setattr__(usage, "__pydantic_extra__", None)
    object.__setattr__(usage, "__pydantic_private__", None)
    return usage


def accumulate(data: Mapping[str, Any] | None, usage: Usage) -> dict[str, int]:
    """``(Usage.from_dict(data) + usage).to_dict()``: a stored usage dict plus ``usage``.

    The engine adds every model call's usage to the checkpoint's running total;
    adding the numbers directly skips building two intermediate Usage models.
    Values that need normalizing (not a non-negative int) take the model path.
    """
    if not isinstance(usage, Usage):
        return (Usage.from_dict(data) + usage).to_dict()  # raises TypeError, as adding would
    values = data or {}
    totals = {}
    for name in FIELDS:
        stored = values.get(name, 0)
        if type(stored) is not int or stored < 0:
            return (Usage.from_dict(data) + usage).to_dict()
        totals[name] = stored + getattr(usage, name)
    totals["total_tokens"] = sum(totals.values())
    return totals


__all__ = ["Usage", "accumulate"]
