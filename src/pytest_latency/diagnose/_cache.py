"""Prompt-cache health: prefixes that never get read, breakpoints below the minimum, fields absent.

Owns the `unstable_prefix`, `below_cache_minimum` and `cache_fields_absent` findings, and where
two prompts first diverge (from the chained prefix hashes `metrics` keeps; no prompt text exists
to compare). Imports only the stdlib, `pytest_latency.metrics` and its sibling `_finding`.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Sequence

from pytest_latency.diagnose._finding import (
    BELOW_CACHE_MINIMUM,
    CACHE_FIELDS_ABSENT,
    DEFAULTS,
    UNSTABLE_PREFIX,
    Finding,
    Thresholds,
)
from pytest_latency.metrics import (
    ANTHROPIC_MESSAGES,
    CHARS_PER_TOKEN,
    PREFIX_BLOCK_CHARS,
    CallMetrics,
)

SERVER_FLAGS = "vLLM --enable-prompt-tokens-details, SGLang --enable-cache-report"


def first_divergence(a: CallMetrics, b: CallMetrics) -> int | None:
    """The first prefix block (of PREFIX_BLOCK_CHARS characters) where two prompts differ; None
    when every block both prompts have is equal (they agree at least that far)."""
    for index, (x, y) in enumerate(zip(a.prefix_hashes, b.prefix_hashes, strict=False)):
        if x != y:
            return index
    return None


def _cacheable_chars(call: CallMetrics) -> int | None:
    # Anthropic caches up to the last breakpoint; OpenAI-style APIs cache the whole prompt.
    if call.cache_breakpoint_chars is not None:
        return call.cache_breakpoint_chars
    return call.prompt_chars if call.api != ANTHROPIC_MESSAGES else None


def _missed(call: CallMetrics, thresholds: Thresholds) -> bool:
    """A call that could have read the cache and read nothing of it."""
    if not call.cache_fields_reported or (call.cache_read_tokens or 0) > 0:
        return False
    if (call.cache_write_tokens or 0) > 0:
        return True
    # OpenAI reports no writes: a cacheable-size prompt that read nothing is the same symptom.
    cacheable = _cacheable_chars(call)
    return (
        call.api != ANTHROPIC_MESSAGES
        and cacheable is not None
        and cacheable / CHARS_PER_TOKEN >= thresholds.cache_minimum(call.api)
    )


def compares_prefix(call: CallMetrics, thresholds: Thresholds = DEFAULTS) -> bool:
    """Whether the cache checks ever read this call's prefix hashes: only a call that could have
    read the cache and read nothing of it is compared with its neighbours (`unstable_prefix`)."""
    return call.error is None and _missed(call, thresholds)


def cache_findings(
    calls: Sequence[CallMetrics], thresholds: Thresholds = DEFAULTS
) -> list[Finding]:
    ok = [c for c in calls if c.error is None]
    with_usage = [c for c in ok if c.input_tokens is not None]
    if with_usage and not any(c.cache_fields_reported for c in with_usage):
        return [
            Finding(
                CACHE_FIELDS_ABSENT,
                f"none of {len(with_usage)} calls reported prompt-cache usage, so cache reads "
                "are unknown (absent, not 0); self-hosted servers report them only when "
                f"enabled: {SERVER_FLAGS}",
                {"calls_with_usage": len(with_usage), "server_flags": SERVER_FLAGS},
            )
        ]
    found: list[Finding] = []
    below = [
        c
        for c in ok
        if c.cache_breakpoint_tokens is not None
        and c.cache_breakpoint_tokens < thresholds.cache_minimum(c.api)
    ]
    if below:
        sizes = sorted(c.cache_breakpoint_tokens or 0 for c in below)
        api = Counter(c.api for c in below).most_common(1)[0][0]
        minimum = thresholds.cache_minimum(api)
        written = sum((c.cache_write_tokens or 0) + (c.cache_read_tokens or 0) for c in below)
        per_model = " (2,048 or 4,096 on some models)" if api == ANTHROPIC_MESSAGES else ""
        found.append(
            Finding(
                BELOW_CACHE_MINIMUM,
                f"{len(below)} of {len(ok)} calls put a cache_control breakpoint after ~"
                f"{sizes[len(sizes) // 2]} tokens (estimated at {CHARS_PER_TOKEN} characters a "
                f"token), below the {minimum:,}-token minimum for {api}{per_model}: the "
                "provider caches nothing and says nothing; grow the cached prefix past the "
                "minimum or drop the breakpoint",
                {
                    "calls": len(below),
                    "of": len(ok),
                    "api": api,
                    "min_tokens": minimum,
                    "breakpoint_tokens_median": sizes[len(sizes) // 2],
                    "breakpoint_tokens_max": sizes[-1],
                    "cache_tokens_read_or_written": written,
                },
            )
        )
    missed = sorted((c for c in ok if _missed(c, thresholds)), key=lambda c: c.t_start_ns)
    if len(missed) >= thresholds.unstable_min_calls:
        unstable = _unstable(missed, ok)
        if unstable is not None:
            found.append(unstable)
    return found


def _unstable(missed: Sequence[CallMetrics], ok: Sequence[CallMetrics]) -> Finding | None:
    blocks: list[int] = []
    for a, b in itertools.pairwise(missed):
        index = first_divergence(a, b)
        cacheable = min(_cacheable_chars(a) or 0, _cacheable_chars(b) or 0)
        if index is not None and index * PREFIX_BLOCK_CHARS < cacheable:
            blocks.append(index)
    if not blocks:
        # The prompts agree through their cacheable prefix: the misses have another cause (TTL,
        # eviction, parallel calls writing before either reads), not an unstable prefix.
        return None
    block, count = Counter(blocks).most_common(1)[0]
    start, end = block * PREFIX_BLOCK_CHARS, (block + 1) * PREFIX_BLOCK_CHARS
    writes = sum(c.cache_write_tokens or 0 for c in missed)
    return Finding(
        UNSTABLE_PREFIX,
        f"unstable prefix: {len(missed)} of {len(ok)} calls read nothing from the prompt cache "
        f"({writes:,} tokens written and never read); consecutive prompts first differ at "
        f"characters {start:,}–{end:,} (tokens ~{start // CHARS_PER_TOKEN:,}–"
        f"{end // CHARS_PER_TOKEN:,}) in {count} of {len(missed) - 1} pairs: move whatever "
        "changes there (a timestamp, an id, a shuffled list) after the cached prefix",
        {
            "calls": len(missed),
            "of": len(ok),
            "cache_write_tokens": writes,
            "diverge_char_start": start,
            "diverge_char_end": end,
            "diverge_token_start": start // CHARS_PER_TOKEN,
            "pairs_diverging_there": count,
            "pairs": len(missed) - 1,
        },
    )
