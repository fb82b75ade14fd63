"""Usage normalisation: each provider's token counts mapped onto one meaning.

Owns the rule that `input_tokens` means *all* prompt tokens, cached ones included (the OTel
convention), and that a count the server did not send is `None`, never 0 and never guessed. Knows
the usage shapes of Anthropic Messages, OpenAI Chat/Completions and OpenAI Responses (see
docs/metrics.md, "Usage normalisation"). Stdlib only; imports nothing from the package.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Usage:
    input_tokens: int | None = None
    output_tokens: int | None = None
    cache_read_tokens: int | None = None
    cache_write_tokens: int | None = None
    reasoning_tokens: int | None = None

    @property
    def cache_fields_reported(self) -> bool:
        """The server said how many prompt tokens came from the cache (0 included)."""
        return self.cache_read_tokens is not None


def count(value: object) -> int | None:
    """A token count as sent, or None: bools, floats, strings and negatives are not counts."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return None


def _details(usage: dict[str, Any], key: str) -> dict[str, Any]:
    value = usage.get(key)
    return value if isinstance(value, dict) else {}


class UsageTracker:
    """Collects the usage objects of one call, in stream order.

    Anthropic sends usage in pieces (`message_start`, then cumulative `message_delta`s that may
    repeat the input and cache fields), so it is merged field by field, the latest value winning.
    OpenAI sends one complete usage object (or, on some compatible servers, a cumulative one per
    chunk), so the latest object replaces the previous one.
    """

    __slots__ = ("_anthropic", "_fields")

    def __init__(self, anthropic: bool) -> None:
        self._anthropic = anthropic
        self._fields: dict[str, int] = {}

    def update(self, usage: object) -> None:
        if not isinstance(usage, dict):
            return
        fields = _anthropic_fields(usage) if self._anthropic else _openai_fields(usage)
        if self._anthropic:
            self._fields.update(fields)
        else:
            self._fields = fields

    def result(self) -> Usage:
        f = self._fields
        if not self._anthropic:
            return Usage(
                input_tokens=f.get("input"),
                output_tokens=f.get("output"),
                cache_read_tokens=f.get("cache_read"),
                cache_write_tokens=f.get("cache_write"),
                reasoning_tokens=f.get("reasoning"),
            )
        # Anthropic's input_tokens excludes both cache counts; the total is the three summed.
        uncached = f.get("input")
        read, write = f.get("cache_read"), f.get("cache_write")
        total = None if uncached is None else uncached + (read or 0) + (write or 0)
        return Usage(
            input_tokens=total,
            output_tokens=f.get("output"),
            cache_read_tokens=read,
            cache_write_tokens=write,
            reasoning_tokens=f.get("reasoning"),
        )


def _put(fields: dict[str, int], key: str, value: object) -> None:
    n = count(value)
    if n is not None:
        fields[key] = n


def _anthropic_fields(usage: dict[str, Any]) -> dict[str, int]:
    fields: dict[str, int] = {}
    _put(fields, "input", usage.get("input_tokens"))
    _put(fields, "output", usage.get("output_tokens"))
    _put(fields, "cache_read", usage.get("cache_read_input_tokens"))
    _put(fields, "cache_write", usage.get("cache_creation_input_tokens"))
    details = _details(usage, "output_tokens_details")
    _put(fields, "reasoning", details.get("thinking_tokens", details.get("reasoning_tokens")))
    return fields


def _openai_fields(usage: dict[str, Any]) -> dict[str, int]:
    fields: dict[str, int] = {}
    # Chat/Completions say prompt/completion; Responses says input/output. Both include cached.
    chat = "prompt_tokens" in usage or "completion_tokens" in usage
    _put(fields, "input", usage.get("prompt_tokens" if chat else "input_tokens"))
    _put(fields, "output", usage.get("completion_tokens" if chat else "output_tokens"))
    prompt = _details(usage, "prompt_tokens_details" if chat else "input_tokens_details")
    _put(fields, "cache_read", prompt.get("cached_tokens"))
    _put(fields, "cache_write", prompt.get("cache_write_tokens"))
    output = _details(usage, "completion_tokens_details" if chat else "output_tokens_details")
    _put(fields, "reasoning", output.get("reasoning_tokens"))
    return fields
