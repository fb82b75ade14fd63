"""One adapter per LLM wire API, behind the `WireApi` Protocol, and the registry that finds them.

Owns the registry (`ADAPTERS`, in the order payload sniffing tries them; paths match at most one)
and the lookup of a call's API from its URL path, then from the shape of its payloads, falling
back to `UNKNOWN_API`. The generic parts of the metrics (SSE parsing, content decoding, the
per-call scan and assembly, fingerprint hashing) ask the adapter and know no API. Adding an API is
one module implementing `WireApi` (see `openai_completions` for the smallest) and its entry here.
May import only the stdlib and the metrics modules `_usage` and `_fingerprint`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pytest_latency.metrics.apis import (
    anthropic_messages,
    gemini_generate_content,
    openai_chat,
    openai_completions,
    openai_responses,
    unknown,
)
from pytest_latency.metrics.apis._protocol import (
    AUDIO,
    CHANNELS,
    NOTHING,
    REASONING,
    REFUSAL,
    TEXT,
    TOOL,
    Classified,
    ProviderError,
    Request,
    WireApi,
)

ADAPTERS: tuple[WireApi, ...] = (
    anthropic_messages,
    openai_chat,
    openai_responses,
    openai_completions,
    gemini_generate_content,
)
UNKNOWN_API: WireApi = unknown.Unknown(ADAPTERS)
UNKNOWN = UNKNOWN_API.NAME


def for_path(path: str) -> WireApi:
    """The adapter whose path this is, or `UNKNOWN_API`."""
    path = path.rstrip("/")
    for api in ADAPTERS:
        if api.matches_path(path):
            return api
    return UNKNOWN_API


def for_payload(payload: Mapping[str, Any]) -> WireApi:
    """The first adapter (in registry order) whose shape the payload has, or `UNKNOWN_API`."""
    for api in ADAPTERS:
        if api.matches_payload(payload):
            return api
    return UNKNOWN_API


__all__ = [
    "ADAPTERS",
    "AUDIO",
    "CHANNELS",
    "NOTHING",
    "REASONING",
    "REFUSAL",
    "TEXT",
    "TOOL",
    "UNKNOWN",
    "UNKNOWN_API",
    "Classified",
    "ProviderError",
    "Request",
    "WireApi",
    "for_path",
    "for_payload",
]
