"""The latency model: every knob of the simulated endpoint, validated, with named presets.

Owns `LatencyModel` (a frozen, validated value object), `SimSettingsError`, the presets, and the
parsing of per-request overrides (JSON values or header strings) into a validated copy. It is a
leaf of the sim package: stdlib only, and it imports nothing else from the package, so the CLI
can build and validate a model without importing aiohttp.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["FAULTS", "PRESETS", "FieldDoc", "LatencyModel", "SimSettingsError", "field_docs"]

# The fault names a request can be forced into. "" means "no forced fault".
FAULTS: tuple[str, ...] = ("429", "500", "529", "sse_error", "drop", "stall")


class SimSettingsError(ValueError):
    """A latency-model setting (or a per-request override) has a bad value.

    The message names the field and the value, e.g. ``decode_ms_per_token must be >= 0, got -1.0``.
    """


@dataclass(frozen=True, slots=True)
class FieldDoc:
    """Unit and one-line meaning of a model field; drives the CLI help and docs/simulator.md."""

    unit: str
    help: str


def _f(default: Any, unit: str, help: str) -> Any:
    return field(default=default, metadata={"doc": FieldDoc(unit, help)})


@dataclass(frozen=True, slots=True)
class LatencyModel:
    """How the simulated endpoint spends time and tokens. All fields are keyword-only.

    Times are in the unit their name says (``_ms``, ``_us``, ``_s``). Construction validates every
    field and raises `SimSettingsError` naming the first bad one, so an invalid model never
    reaches the server.
    """

    # --- timing -------------------------------------------------------------------------------
    ttfb_ms: float = _f(1.0, "ms", "time from request received to response headers")
    prefill_us_per_token: float = _f(5.0, "µs/token", "prefill cost per uncached prompt token")
    prefill_us_per_token_sq: float = _f(
        0.0, "µs/token²", "quadratic prefill term, times (uncached tokens)²"
    )
    decode_ms_per_token: float = _f(1.0, "ms/token", "decode time per output token")
    tokens_per_chunk: int = _f(1, "tokens", "output tokens carried by one streamed event")
    jitter: float = _f(0.0, "sigma", "lognormal sigma of a mean-one factor on every timed step")
    tail_prob: float = _f(0.0, "probability", "chance a request gets tail_ms before first token")
    tail_ms: float = _f(0.0, "ms", "extra delay before the first token of a tail request")
    concurrency_slowdown: float = _f(
        0.0, "factor", "decode time × (1 + k × (streams served − 1)), k = this"
    )
    # --- capacity -----------------------------------------------------------------------------
    max_concurrency: int = _f(
        0, "streams", "requests served at once; more wait in the queue (0: no limit)"
    )
    max_queue: int = _f(
        0, "requests", "requests waiting for a slot; one more gets a 429 with retry-after"
    )
    seed: int = _f(0, "int", "seed of text, jitter, tails and random faults")
    # --- output length ------------------------------------------------------------------------
    output_tokens: int = _f(16, "tokens", "answer length (capped by the request's max_tokens)")
    reasoning_tokens: int = _f(
        8, "tokens", "reasoning length when the request asks for reasoning/thinking"
    )
    # --- prefix cache -------------------------------------------------------------------------
    cache_min_tokens: int = _f(1024, "tokens", "shortest prefix that is cached or read")
    cache_block_tokens: int = _f(64, "tokens", "cache granularity: prefixes match in whole blocks")
    cache_ttl_s: float = _f(300.0, "s", "an unused cached block expires after this long")
    cache_long_ttl_s: float = _f(
        3600.0, "s", "an unused block cached with Anthropic's 1-hour ttl expires after this long"
    )
    cache_capacity_tokens: int = _f(
        4_000_000, "tokens", "cache size; least recently used blocks are evicted"
    )
    # --- faults -------------------------------------------------------------------------------
    fault: str = _f("", "name", "force a fault: " + ", ".join(FAULTS) + " (empty: none)")
    fault_attempts: int = _f(
        0,
        "attempts",
        "forced fault only on SDK attempts with retry count < this (0: every attempt)",
    )
    fault_429_prob: float = _f(0.0, "probability", "chance of a 429 rate-limit response")
    fault_500_prob: float = _f(0.0, "probability", "chance of a 500 internal error response")
    fault_529_prob: float = _f(0.0, "probability", "chance of a 529 overloaded response")
    fault_sse_error_prob: float = _f(0.0, "probability", "chance of an SSE error event mid-stream")
    fault_drop_prob: float = _f(0.0, "probability", "chance the connection is dropped mid-stream")
    fault_stall_prob: float = _f(0.0, "probability", "chance of a stall mid-stream")
    fault_at: float = _f(0.5, "fraction", "where in the stream mid-stream faults happen")
    retry_after_ms: float = _f(
        20.0, "ms", "retry-after(-ms) sent with 429/529, the limit's too (the SDKs honour it)"
    )
    stall_ms: float = _f(200.0, "ms", "length of a stall")

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            _check_field(f.name, getattr(self, f.name))
        if self.max_queue and not self.max_concurrency:
            # A queue forms only behind a limit: said rather than silently ignored.
            raise SimSettingsError(
                f"max_queue={self.max_queue} needs max_concurrency > 0 (the queue waits for "
                "its slots)"
            )

    @classmethod
    def preset(cls, name: str) -> LatencyModel:
        """The named preset; an unknown name raises `SimSettingsError` listing the valid ones."""
        try:
            overrides = PRESETS[name]
        except KeyError:
            raise SimSettingsError(
                f"unknown preset {name!r}; valid presets: {', '.join(PRESETS)}"
            ) from None
        return cls(**overrides)

    def replace(self, **overrides: Any) -> LatencyModel:
        """A validated copy with `overrides` applied; unknown names raise `SimSettingsError`."""
        for name in overrides:
            if name not in _FIELD_TYPES:
                raise SimSettingsError(_unknown_field(name))
        return dataclasses.replace(self, **overrides)

    def with_overrides(self, raw: Mapping[str, Any]) -> LatencyModel:
        """Apply loosely typed overrides (JSON values or header strings), coercing each to its type.

        ``preset`` is accepted as a key: the named preset replaces the base before the other keys.
        """
        base = self
        values: dict[str, Any] = {}
        for name, value in raw.items():
            key = name.replace("-", "_").lower()
            if key == "preset":
                base = LatencyModel.preset(str(value))
                continue
            if key not in _FIELD_TYPES:
                raise SimSettingsError(_unknown_field(key))
            values[key] = _coerce(key, value)
        return base.replace(**values) if values else base

    def to_dict(self) -> dict[str, Any]:
        """Plain field values, JSON-serialisable."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}


PRESETS: dict[str, dict[str, Any]] = {
    # Millisecond-free: every step takes no modelled time. For functional tests.
    "instant": {
        "ttfb_ms": 0.0,
        "prefill_us_per_token": 0.0,
        "decode_ms_per_token": 0.0,
        "jitter": 0.0,
    },
    # Fast but visibly shaped: a few ms per call, so the plugin's own suite stays quick.
    "default": {},
    # A self-hosted vLLM/SGLang box: small TTFB, real prefill cost, token-per-event streaming.
    "local": {
        "ttfb_ms": 3.0,
        "prefill_us_per_token": 40.0,
        "decode_ms_per_token": 12.0,
        "tokens_per_chunk": 1,
        "jitter": 0.05,
        "concurrency_slowdown": 0.02,
        "output_tokens": 64,
    },
    # The examples' endpoint: shaped like "hosted" (prefill cost, multi-token events, noise,
    # rare tails) at a tenth of the time, so a demo suite of hundreds of calls takes seconds.
    "demo": {
        "ttfb_ms": 12.0,
        "prefill_us_per_token": 6.0,
        "decode_ms_per_token": 1.5,
        "tokens_per_chunk": 3,
        "jitter": 0.2,
        "tail_prob": 0.01,
        "tail_ms": 150.0,
        "output_tokens": 48,
        "reasoning_tokens": 24,
        "cache_min_tokens": 1024,
    },
    # A hosted frontier API: slow headers, multi-token events, noise and rare long tails.
    "hosted": {
        "ttfb_ms": 120.0,
        "prefill_us_per_token": 60.0,
        "decode_ms_per_token": 15.0,
        "tokens_per_chunk": 3,
        "jitter": 0.25,
        "tail_prob": 0.02,
        "tail_ms": 1500.0,
        "output_tokens": 128,
        "reasoning_tokens": 64,
    },
}

_FIELD_TYPES: dict[str, str] = {f.name: str(f.type) for f in dataclasses.fields(LatencyModel)}


def field_docs() -> list[tuple[str, str, Any, FieldDoc]]:
    """(name, type, default, doc) for every model field, in declaration order."""
    return [
        (f.name, str(f.type), f.default, f.metadata["doc"])
        for f in dataclasses.fields(LatencyModel)
    ]


def _unknown_field(name: str) -> str:
    return f"unknown latency-model field {name!r}; valid fields: {', '.join(_FIELD_TYPES)}"


def _coerce(name: str, value: Any) -> Any:
    kind = _FIELD_TYPES[name]
    try:
        if kind == "str":
            return "" if value is None else str(value)
        if isinstance(value, bool):
            raise TypeError
        if kind == "int":
            if isinstance(value, float) and not value.is_integer():
                raise TypeError
            return int(value)
        return float(value)
    except (TypeError, ValueError):
        raise SimSettingsError(f"{name} must be a {kind}, got {value!r}") from None


_PROBABILITIES = {"tail_prob", "fault_at"} | {
    n for n in _FIELD_TYPES if n.startswith("fault_") and n.endswith("_prob")
}
_AT_LEAST_ONE = {"tokens_per_chunk", "cache_block_tokens"}


def _check_field(name: str, value: Any) -> None:
    kind = _FIELD_TYPES.get(name)
    if kind is None:
        return
    if kind == "str":
        if not isinstance(value, str):
            raise SimSettingsError(f"{name} must be a str, got {value!r}")
        if name == "fault" and value and value not in FAULTS:
            raise SimSettingsError(
                f"fault must be one of {', '.join(FAULTS)} or empty, got {value!r}"
            )
        return
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise SimSettingsError(f"{name} must be a {kind}, got {value!r}")
    if kind == "int" and not isinstance(value, int):
        raise SimSettingsError(f"{name} must be an int, got {value!r}")
    if not math.isfinite(value):
        raise SimSettingsError(f"{name} must be finite, got {value!r}")
    if name in _PROBABILITIES and not 0.0 <= value <= 1.0:
        raise SimSettingsError(f"{name} must be between 0 and 1, got {value!r}")
    if name in _AT_LEAST_ONE and value < 1:
        raise SimSettingsError(f"{name} must be >= 1, got {value!r}")
    if name != "seed" and value < 0:
        raise SimSettingsError(f"{name} must be >= 0, got {value!r}")


def parse_override_json(text: str, source: str) -> dict[str, Any]:
    """Parse a JSON object of overrides (from a header or a CLI flag); errors name `source`."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SimSettingsError(f"{source} is not valid JSON: {exc.msg}") from None
    if not isinstance(data, dict):
        raise SimSettingsError(f"{source} must be a JSON object, got {type(data).__name__}")
    return data
