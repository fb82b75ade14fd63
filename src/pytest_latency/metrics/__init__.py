"""Wire timeline → per-call metrics: SSE parsing, protocol classification, usage normalisation.

Owns `call_metrics(record) -> CallMetrics`, the only way the rest of the package turns a captured
HTTP attempt into numbers, and the vocabulary it uses (API names, output channels). Its parts:
`apis/` (one adapter per wire API behind the `WireApi` Protocol: detection, event and body
classification, usage shapes, output text), and the generic modules that ask the adapter:
`_body` (content-encoding), `_sse` (event parsing with arrival stamps), `_scan` (the body walk),
`_usage` (the normalised meaning of usage), `_fingerprint` (prompt and output hashes for
diagnosis, never text), `_asked` and `_ends` (a sync call's events read back by the kernel's
arrival times), `_pace` (the consumer's pace: the consumer-bound detector, how far behind a sync
consumer may be), `_call` (assembly).
May import only the stdlib, `pytest_latency.wire` and `pytest_latency.catalogue`; never pytest,
never httpx. Definitions: docs/metrics.md.
"""

from __future__ import annotations

from pytest_latency.metrics._call import (
    SATURATED_LAG_MS,
    STAMP_TARGET_MS,
    CallMetrics,
    call_metrics,
)
from pytest_latency.metrics._fingerprint import (
    CHARS_PER_TOKEN,
    PREFIX_BLOCK_CHARS,
    contains_output,
)
from pytest_latency.metrics.apis import (
    ADAPTERS,
    AUDIO,
    CHANNELS,
    REASONING,
    REFUSAL,
    TEXT,
    TOOL,
    UNKNOWN,
    WireApi,
    anthropic_messages,
    gemini_generate_content,
    openai_chat,
    openai_completions,
    openai_responses,
)

ANTHROPIC_MESSAGES = anthropic_messages.NAME
OPENAI_CHAT = openai_chat.NAME
OPENAI_RESPONSES = openai_responses.NAME
OPENAI_COMPLETIONS = openai_completions.NAME
GEMINI_GENERATE_CONTENT = gemini_generate_content.NAME
# Every value CallMetrics.api takes: the adapters' names, in registry order, then UNKNOWN.
APIS = (*(api.NAME for api in ADAPTERS), UNKNOWN)

__all__ = [
    "ANTHROPIC_MESSAGES",
    "APIS",
    "AUDIO",
    "CHANNELS",
    "CHARS_PER_TOKEN",
    "GEMINI_GENERATE_CONTENT",
    "OPENAI_CHAT",
    "OPENAI_COMPLETIONS",
    "OPENAI_RESPONSES",
    "PREFIX_BLOCK_CHARS",
    "REASONING",
    "REFUSAL",
    "SATURATED_LAG_MS",
    "STAMP_TARGET_MS",
    "TEXT",
    "TOOL",
    "UNKNOWN",
    "CallMetrics",
    "WireApi",
    "call_metrics",
    "contains_output",
]
