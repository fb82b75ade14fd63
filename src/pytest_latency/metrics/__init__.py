"""Wire timeline → per-call metrics: SSE parsing, protocol classification, usage normalisation.

Owns `call_metrics(record) -> CallMetrics`, the only way the rest of the package turns a captured
HTTP attempt into numbers, and the vocabulary it uses (API names, output channels). Its private
modules: `_body` (content-encoding), `_sse` (event parsing with arrival stamps), `_protocols`
(API detection and event classification), `_usage` (usage normalisation), `_fingerprint` (prompt
and output hashes for diagnosis, never text), `_call` (assembly).
May import only the stdlib, `pytest_latency.wire` and `pytest_latency.catalogue`; never pytest,
never httpx. Definitions: docs/metrics.md.
"""

from __future__ import annotations

from pytest_latency.metrics._call import SATURATED_LAG_MS, CallMetrics, call_metrics
from pytest_latency.metrics._fingerprint import (
    CHARS_PER_TOKEN,
    PREFIX_BLOCK_CHARS,
    contains_output,
)
from pytest_latency.metrics._protocols import (
    ANTHROPIC_MESSAGES,
    APIS,
    AUDIO,
    CHANNELS,
    OPENAI_CHAT,
    OPENAI_COMPLETIONS,
    OPENAI_RESPONSES,
    REASONING,
    REFUSAL,
    TEXT,
    TOOL,
    UNKNOWN,
)

__all__ = [
    "ANTHROPIC_MESSAGES",
    "APIS",
    "AUDIO",
    "CHANNELS",
    "CHARS_PER_TOKEN",
    "OPENAI_CHAT",
    "OPENAI_COMPLETIONS",
    "OPENAI_RESPONSES",
    "PREFIX_BLOCK_CHARS",
    "REASONING",
    "REFUSAL",
    "SATURATED_LAG_MS",
    "TEXT",
    "TOOL",
    "UNKNOWN",
    "CallMetrics",
    "call_metrics",
    "contains_output",
]
