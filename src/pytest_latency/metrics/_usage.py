"""Usage: the one meaning every API's token counts are normalised to, and its collection.

Owns the rule that `input_tokens` means *all* prompt tokens, cached ones included (the OTel
convention), that `cache_write_tokens` is every cache write and `cache_write_1h_tokens` the part
of it written to a 1-hour cache, and that a count the server did not send is `None`, never 0 and
never guessed; `UsageFields` (counts as an API sent them, before normalisation) and
`UsageTracker`, which folds a call's usage objects in stream order through its API's adapter.
The shapes themselves belong to the adapters (`apis/`; docs/metrics.md, "Usage normalisation").
Stdlib only; imports nothing from the package at run time (the adapter Protocol for types only).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pytest_latency.metrics.apis import WireApi


@dataclass(frozen=True, slots=True)
class Usage:
    input_tokens: int | None = None
    output_tokens: int | None = None
    cache_read_tokens: int | None = None
    cache_write_tokens: int | None = None
    reasoning_tokens: int | None = None
    # The part of `cache_write_tokens` written to a 1-hour cache (Anthropic bills it at 2× input,
    # a 5-minute write at 1.25×); None when the server did not split its writes by TTL.
    cache_write_1h_tokens: int | None = None

    @property
    def cache_fields_reported(self) -> bool:
        """The server said how many prompt tokens came from the cache (0 included)."""
        return self.cache_read_tokens is not None


@dataclass(frozen=True, slots=True)
class UsageFields:
    """Token counts as one API sent them (Anthropic's `input_tokens` excludes cached ones)."""

    input_tokens: int | None = None
    output_tokens: int | None = None
    cache_read_tokens: int | None = None
    cache_write_tokens: int | None = None
    reasoning_tokens: int | None = None
    cache_write_1h_tokens: int | None = None

    def merged(self, later: UsageFields) -> UsageFields:
        """Field by field, a count `later` sent winning over this one."""
        return UsageFields(
            *(
                mine if theirs is None else theirs
                for mine, theirs in (
                    (getattr(self, name), getattr(later, name)) for name in _FIELD_NAMES
                )
            )
        )


# Every field, in order: `merged` walks them all, so a new count cannot be left out of it.
_FIELD_NAMES = tuple(f.name for f in fields(UsageFields))
NO_FIELDS = UsageFields()


# No model's context window or output comes near a billion tokens; a larger count (or a
# negative one) is a server or proxy bug, and taken at face value it would overflow the float
# arithmetic of tpot and the cache ratio (a 10^400 count raised OverflowError and ended a run).
MAX_TOKEN_COUNT = 10**9


class UsageOutOfRange(ValueError):
    """A usage field held an integer no token count can be (negative, or past MAX_TOKEN_COUNT)."""


def count(value: object) -> int | None:
    """A token count as sent, or None when the field holds no count (absent, a bool, a float, a
    string). Raises `UsageOutOfRange` for an integer out of any sane range."""
    if isinstance(value, int) and not isinstance(value, bool):
        if 0 <= value <= MAX_TOKEN_COUNT:
            return value
        # Never format the value itself: a 4,000-digit int is its own denial of service.
        shown = (
            str(value)
            if value.bit_length() < 64
            else f"{'-' if value < 0 else ''}~2^{value.bit_length()}"
        )
        raise UsageOutOfRange(f"token count {shown} out of range (0..{MAX_TOKEN_COUNT:,})")
    return None


class UsageTracker:
    """Collects the usage objects of one call, in stream order, through its API's adapter."""

    __slots__ = ("_api", "_fields", "rejected")

    def __init__(self, api: WireApi) -> None:
        self._api = api
        self._fields = NO_FIELDS
        # Why a usage object was dropped (the first one only): the call records a protocol
        # error; the counts read before it stand.
        self.rejected: str | None = None

    def update(self, usage: object) -> None:
        if isinstance(usage, dict):
            try:
                self._fields = self._api.read_usage(usage, self._fields)
            except UsageOutOfRange as exc:
                if self.rejected is None:
                    self.rejected = str(exc)

    def result(self) -> Usage:
        return self._api.normalise_usage(self._fields)
