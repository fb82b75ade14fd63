"""The finding: one diagnosis, its stable kind, a plain sentence and the numbers it rests on.

Owns the `Finding` value, the list of stable kinds (DESIGN.md, "findings"), the thresholds every
check reads (one frozen `Thresholds`, so a caller can tune them and the docs can list them) and
the readable titles of the kinds and their order. Imports only the stdlib and `units`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from pytest_latency import units

PREFILL_BOUND: Final = "prefill_bound"
DECODE_BOUND: Final = "decode_bound"
UNSTABLE_PREFIX: Final = "unstable_prefix"
BELOW_CACHE_MINIMUM: Final = "below_cache_minimum"
CACHE_FIELDS_ABSENT: Final = "cache_fields_absent"
SERIAL_INDEPENDENT_CALLS: Final = "serial_independent_calls"
CONSUMER_BOUND: Final = "consumer_bound"
CLIENT_SATURATED: Final = "client_saturated"
CPU_STARVED: Final = "cpu_starved"
GC_PAUSED: Final = "gc_paused"
UNPRICED_MODEL: Final = "unpriced_model"
CAPTURE_ESCAPED: Final = "capture_escaped"
TOO_FEW_SAMPLES: Final = "too_few_samples"
SCHEDULE_SLIPPED: Final = "schedule_slipped"
# The stable kinds with their readable titles, in the order readers are shown them: the levers
# first, the caveats last (docs/diagnosis.md).
TITLES: Final[Mapping[str, str]] = {
    PREFILL_BOUND: "Prefill-bound",
    DECODE_BOUND: "Decode-bound",
    SERIAL_INDEPENDENT_CALLS: "Serial calls that could run in parallel",
    UNSTABLE_PREFIX: "Unstable prompt prefix",
    BELOW_CACHE_MINIMUM: "Cache breakpoint below the provider's minimum",
    CACHE_FIELDS_ABSENT: "Cache fields absent",
    CONSUMER_BOUND: "Consumer-bound calls",
    CLIENT_SATURATED: "Client saturated",
    CPU_STARVED: "Busy machine",
    GC_PAUSED: "Garbage-collection pauses",
    SCHEDULE_SLIPPED: "Open-loop schedule slipped",
    UNPRICED_MODEL: "No price for the model",
    CAPTURE_ESCAPED: "Traffic that bypassed capture",
    TOO_FEW_SAMPLES: "Too few samples",
}
KINDS: Final = tuple(TITLES)


def title(kind: str, evidence: Mapping[str, Any] | None = None) -> str:
    """A kind's readable title (an unknown kind, from a newer file, by its name)."""
    if kind == TOO_FEW_SAMPLES and evidence and evidence.get("check") == "budget":
        return "Too few samples for the budget"
    return TITLES.get(kind, kind.replace("_", " ").capitalize())


def rank(kind: str) -> int:
    """Where a kind comes in the readers' order (unknown kinds last)."""
    return KINDS.index(kind) if kind in TITLES else len(KINDS)


# Smallest cacheable prompt prefix, in tokens, per API family (anchors.md §0/§7). Anthropic's is
# 1,024 for most models, 2,048 for the Haiku models and 4,096 for some newer ones: pass the
# model's own figure through `Thresholds(cache_min_tokens=...)` when it is not 1,024.
CACHE_MIN_TOKENS: Final[Mapping[str, int]] = {
    "anthropic.messages": 1024,
    "openai.chat": 1024,
    "openai.responses": 1024,
    "openai.completions": 1024,
    # Gemini's implicit caching: 1,024 for the Flash models, more for Pro (2,048 or 4,096).
    "gemini.generate_content": 1024,
}
DEFAULT_CACHE_MIN_TOKENS: Final = 1024


@dataclass(frozen=True, slots=True)
class Thresholds:
    """When a check speaks. Every default is documented in docs/diagnosis.md."""

    # Fewer kept calls (or samples, for per-sample checks) than this: too few to say.
    min_calls: int = 5
    # prefill_bound: at least this share of e2e before the first token, and a median uncached
    # prompt of at least this many tokens (a shorter prompt is not a lever worth pulling).
    prefill_share: float = 0.5
    prefill_min_uncached_tokens: int = 1024
    # decode_bound: at least this share of e2e after the first token, and a median answer of at
    # least this many output tokens.
    decode_share: float = 0.75
    decode_min_output_tokens: int = 256
    # The fit of ttft on uncached tokens needs a spread of uncached tokens at least this wide
    # (absolute and relative to the median): a fit over nearly equal sizes is all noise.
    fit_min_range_tokens: int = 256
    fit_min_range_fraction: float = 0.2
    # unstable_prefix: at least this many calls that wrote the cache and read none of it.
    unstable_min_calls: int = 2
    # Minimum cacheable prefix, per API (None: CACHE_MIN_TOKENS); an int applies to every API.
    cache_min_tokens: int | Mapping[str, int] | None = None
    # serial_independent_calls: the overlap must save at least this much per sample (µs).
    serial_min_saving_us: float = 1000.0
    # A test whose multi-call samples run at this concurrency or more runs its calls in parallel
    # (fan-out); below it, one after another.
    parallel_concurrency: float = 1.3
    # schedule_slipped: an open loop's sample that started more than this after its intended
    # start (µs) is late; the finding speaks when at least this share of the samples were.
    # 10 ms: a thread or task starts within ~1 ms on an idle machine, a few ms on a busy one.
    schedule_late_us: float = 10_000.0
    schedule_slip_share: float = 0.05
    # The knee of a sweep (`concurrency=[1, 4, 16]`): the last level whose p95 ttft is within
    # this factor of the lowest level's, when a higher level's is past it.
    knee_ratio: float = 1.5

    def cache_minimum(self, api: str) -> int:
        if isinstance(self.cache_min_tokens, int):
            return self.cache_min_tokens
        table = CACHE_MIN_TOKENS if self.cache_min_tokens is None else self.cache_min_tokens
        return table.get(api, DEFAULT_CACHE_MIN_TOKENS)


DEFAULTS: Final = Thresholds()


@dataclass(frozen=True, slots=True)
class Finding:
    """One diagnosis: `kind` (a stable name from KINDS), a plain sentence with the numbers it rests
    on, and those numbers as JSON-able `evidence` (times in µs, shares 0..1)."""

    kind: str
    message: str
    evidence: Mapping[str, Any] = field(default_factory=dict)
    scope: str = ""  # "" for a test; a group's name for a group finding

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "kind": self.kind,
            "message": self.message,
            "evidence": dict(self.evidence),
        }
        if self.scope:
            out["scope"] = self.scope
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Finding:
        return cls(
            kind=str(data["kind"]),
            message=str(data["message"]),
            evidence=dict(data.get("evidence", {})),
            scope=str(data.get("scope", "")),
        )


# Messages read their numbers the way every output does.
ms = units.duration
percent = units.percent


def too_few(check: str, n: int, needed: int, unit: str = "calls") -> Finding:
    """The finding that says a check could not speak: it had `n` of the `needed` values."""
    return Finding(
        TOO_FEW_SAMPLES,
        f"{check}: {n} {unit}, too few to say (needs {needed})",
        {"check": check, "n": n, "needed": needed, "unit": unit},
    )
